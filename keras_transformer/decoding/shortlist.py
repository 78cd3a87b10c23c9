"""A vocabulary shortlist: the target pieces a batch of sources may need.

Computing the logits of a decoding step against the whole target
vocabulary is the largest product of the step at the paper's base size
(hidden x 32,000 x 512 per row). Marian's lexical shortlist and
CTranslate2's vocabulary map (`vmap.txt`) cut it to the pieces likely for
the batch: per source piece, the target pieces that go with it, plus the
most frequent target pieces always. This module builds, saves, loads and
queries such a list; it needs numpy only (no TensorFlow, no Keras).
`keras_transformer.decoding.shortlisted` decodes with it.

How it is built (`Shortlist.build`), from the training pairs' token ids:

- c(s, t): the number of pairs in which source piece s and target piece t
  both occur (each counted once per pair), c(s) and c(t): the pairs that
  hold s, and t.
- Each source piece keeps its `per_source` target pieces of highest Dice
  coefficient 2 c(s, t) / (c(s) + c(t)) (ties: the smaller target id),
  among those with c(s, t) >= `min_count`. Dice rewards a target piece
  that appears where s does and rarely elsewhere, where a raw count would
  keep the frequent pieces (those come with `frequent` anyway).
- The `frequent` target pieces of highest c(t) (ties: the smaller id) are
  always in, and so are the special ids (pad, unk, bos, eos: 0 to 3).

A batch's candidates (`Shortlist.candidates`) are the union of its source
pieces' lists, the frequent ones, the special ids and any ids the caller
needs (forced prefixes), sorted ascending. Sorting keeps the special ids
0..3 at positions 0..3, so a search run in shortlist space meets them at
their own ids, and keeps ties in the same order as in the full vocabulary.

File format (text, UTF-8, deterministic: the same corpus and settings give
the same bytes):

    keras-transformer shortlist 1
    source_vocabulary_size 32000
    target_vocabulary_size 32000
    per_source 50
    frequent 100
    min_count 1
    always 0 1 2 3 17 ...          (special ids, then the frequent ones, ascending)
    0:                             (one line per source id, in order:
    1: 5 88 1203                    "source_id: target ids, best first")
    ...
"""

import os

import numpy as np

from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
_MAGIC = "keras-transformer shortlist 1"
# The XLA SavedModel's fixed list holds by default the always-kept pieces and
# this many source pieces' lists (`Shortlist.default_size`).
DEFAULT_SIZE_SOURCE_PIECES = 100


def _flat_ids(ids):
    """Any array, or a list of rows of differing lengths, as one flat int64 array."""
    if isinstance(ids, (list, tuple)) and any(isinstance(row, (list, tuple, np.ndarray)) for row in ids):
        return np.concatenate([np.asarray(row, np.int64).reshape(-1) for row in ids] + [np.zeros(0, np.int64)])
    return np.asarray(ids, np.int64).reshape(-1)


def default_multiple(target_vocabulary_size):
    """Lists are padded to a multiple of this many entries: 128, or 8 for a
    vocabulary under 2,048 pieces (fewer shapes to compile)."""
    return 128 if target_vocabulary_size >= 2048 else 8


def _check_count(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return value


class Shortlist:
    """Per source piece, the target pieces kept for it, and the pieces always kept.

    Args:
        table: (source_vocabulary_size, per_source) int32, each row's target
            ids best first, -1 where a source piece has fewer.
        always: the target ids kept for every batch (special ids included).
        target_vocabulary_size: the model's target vocabulary.
        settings: how the list was built (written into the file).
    """

    def __init__(self, table, always, target_vocabulary_size, settings=None):
        table = np.asarray(table, dtype=np.int32)
        if table.ndim != 2:
            raise ValueError(f"`table` must be 2-D (source ids, per_source), got shape {table.shape}.")
        always = np.unique(np.concatenate([np.asarray(always, np.int32).reshape(-1),
                                           np.asarray(SPECIAL_IDS, np.int32)]))
        _check_count("target_vocabulary_size", target_vocabulary_size, len(SPECIAL_IDS))
        for name, ids in (("table", table[table >= 0]), ("always", always)):
            if ids.size and (ids.min() < 0 or ids.max() >= target_vocabulary_size):
                raise ValueError(f"shortlist `{name}` holds ids outside the target vocabulary of "
                                 f"{target_vocabulary_size} (min {ids.min()}, max {ids.max()}).")
        self.table = table
        self.always = always
        self.target_vocabulary_size = int(target_vocabulary_size)
        self.settings = dict(settings or {})

    @property
    def source_vocabulary_size(self):
        return self.table.shape[0]

    @classmethod
    def coerce(cls, shortlist):
        """`shortlist` as a Shortlist: one as it is, a file's path loaded, None as None."""
        if isinstance(shortlist, (str, os.PathLike)):
            return cls.load(shortlist)
        if shortlist is not None and not isinstance(shortlist, cls):
            raise TypeError(f"`shortlist` must be a Shortlist or its file's path, got {type(shortlist).__name__}.")
        return shortlist

    def default_size(self):
        """The fixed candidate count of the XLA SavedModel variant unless
        given (`export_saved_model(shortlist_size=...)`): the always-kept
        pieces plus the lists of `DEFAULT_SIZE_SOURCE_PIECES` source pieces,
        were none shared, to a multiple of `default_multiple`, at most the
        vocabulary. For the 50-per-source, 100-frequent list of a 32,000
        piece vocabulary: 104 + 100 x 50 -> 5,120, which holds the union of
        16 real sentences of 32 pieces (4,834 in serve.py's shortlist
        record); a larger batch's union may exceed it (the exact fallback)."""
        multiple = default_multiple(self.target_vocabulary_size)
        wanted = len(self.always) + DEFAULT_SIZE_SOURCE_PIECES * self.table.shape[1]
        return min(-(-wanted // multiple) * multiple, self.target_vocabulary_size)

    def check_size(self, size):
        """`size` if it can hold the always-kept pieces and one more, else a ValueError naming `shortlist_size`."""
        minimum = len(self.always) + 1
        if isinstance(size, bool) or not isinstance(size, int) or size < minimum:
            raise ValueError(f"`shortlist_size` must be an int >= {minimum} (the list's {len(self.always)} "
                             f"always-kept pieces, special ids included, and one more), got {size!r}.")
        return size

    # -- building -----------------------------------------------------------

    @classmethod
    def build(cls, pairs, source_vocabulary_size, target_vocabulary_size, per_source=50, frequent=100,
              min_count=1, chunk_pairs=20000):
        """Builds a shortlist from `pairs`, an iterable of (source ids,
        target ids) of the training corpus (without BOS/EOS; any special
        ids in them are ignored: they are always kept)."""
        _check_count("per_source", per_source, 1)
        _check_count("frequent", frequent, 0)
        _check_count("min_count", min_count, 1)
        _check_count("source_vocabulary_size", source_vocabulary_size, 1)
        _check_count("target_vocabulary_size", target_vocabulary_size, len(SPECIAL_IDS))
        source_counts = np.zeros(source_vocabulary_size, np.int64)
        target_counts = np.zeros(target_vocabulary_size, np.int64)
        keys, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
        pending = []

        def merge():
            nonlocal keys, counts
            if not pending:
                return
            new_keys = np.concatenate([keys] + pending)
            new_counts = np.concatenate([counts, np.ones(len(new_keys) - len(keys), np.int64)])
            keys, inverse = np.unique(new_keys, return_inverse=True)
            counts = np.bincount(inverse, weights=new_counts, minlength=len(keys)).astype(np.int64)
            pending.clear()

        for index, (source, target) in enumerate(pairs):
            s = np.unique(np.asarray(source, np.int64))
            t = np.unique(np.asarray(target, np.int64))
            if s.size and (s.min() < 0 or s.max() >= source_vocabulary_size):
                raise ValueError(f"pair {index}: source ids must lie in [0, {source_vocabulary_size}), "
                                 f"got {s.min()}..{s.max()}.")
            if t.size and (t.min() < 0 or t.max() >= target_vocabulary_size):
                raise ValueError(f"pair {index}: target ids must lie in [0, {target_vocabulary_size}), "
                                 f"got {t.min()}..{t.max()}.")
            s = s[~np.isin(s, SPECIAL_IDS)]
            t = t[~np.isin(t, SPECIAL_IDS)]
            source_counts[s] += 1
            target_counts[t] += 1
            if s.size and t.size:
                pending.append((s[:, None] * target_vocabulary_size + t[None, :]).reshape(-1))
            if len(pending) >= chunk_pairs:
                merge()
        merge()
        keep = counts >= min_count
        keys, counts = keys[keep], counts[keep]
        sources, targets = keys // target_vocabulary_size, keys % target_vocabulary_size
        dice = 2.0 * counts / (source_counts[sources] + target_counts[targets])
        # Best first within each source: Dice descending, then target id ascending.
        order = np.lexsort((targets, -dice, sources))
        sources, targets = sources[order], targets[order]
        starts = np.searchsorted(sources, np.arange(source_vocabulary_size))
        rank = np.arange(len(sources)) - starts[sources]
        kept = rank < per_source
        table = np.full((source_vocabulary_size, per_source), -1, np.int32)
        table[sources[kept], rank[kept]] = targets[kept]
        # Most frequent first, ties by id (a stable sort of ids by -count).
        seen = np.flatnonzero(target_counts > 0)
        by_count = seen[np.argsort(-target_counts[seen], kind="stable")][:frequent]
        settings = dict(per_source=per_source, frequent=frequent, min_count=min_count)
        return cls(table, by_count, target_vocabulary_size, settings)

    # -- files --------------------------------------------------------------

    def save(self, path):
        lines = [_MAGIC, f"source_vocabulary_size {self.source_vocabulary_size}",
                 f"target_vocabulary_size {self.target_vocabulary_size}"]
        for name in ("per_source", "frequent", "min_count"):
            lines.append(f"{name} {self.settings.get(name, 'unknown')}")
        lines.append("always " + " ".join(str(i) for i in self.always))
        for source_id, row in enumerate(self.table):
            ids = row[row >= 0]
            lines.append(f"{source_id}:" + "".join(f" {i}" for i in ids))
        with open(path, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")

    @classmethod
    def load(cls, path):
        """Reads a file written by `save`; a malformed one raises a
        ValueError naming the file and line."""
        path = os.fspath(path)
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()

        def fail(number, why):
            raise ValueError(f"{path}:{number}: {why}")

        if not lines or lines[0] != _MAGIC:
            fail(1, f"not a shortlist file (its first line must be {_MAGIC!r}).")
        header = {}
        for number, name in enumerate(("source_vocabulary_size", "target_vocabulary_size", "per_source",
                                       "frequent", "min_count"), start=2):
            parts = lines[number - 1].split() if len(lines) >= number else []
            if len(parts) != 2 or parts[0] != name:
                fail(number, f"expected '{name} <value>'.")
            header[name] = parts[1]
        try:
            source_size = int(header["source_vocabulary_size"])
            target_size = int(header["target_vocabulary_size"])
        except ValueError:
            fail(2, "the vocabulary sizes must be integers.")
        if len(lines) < 7 or not lines[6].startswith("always"):
            fail(7, "expected 'always <ids>'.")
        try:
            always = [int(i) for i in lines[6].split()[1:]]
        except ValueError:
            fail(7, "the ids after 'always' must be integers.")
        rows = lines[7:]
        if len(rows) != source_size:
            fail(8 + min(len(rows), source_size),
                 f"expected {source_size} source lines ('id: targets'), found {len(rows)}.")
        lists = []
        for source_id, line in enumerate(rows):
            head, _, rest = line.partition(":")
            try:
                if int(head) != source_id:
                    raise ValueError
                lists.append([int(i) for i in rest.split()])
            except ValueError:
                fail(8 + source_id, f"expected '{source_id}: <target ids>', got {line[:60]!r}.")
        width = max([len(ids) for ids in lists] + [1])
        table = np.full((source_size, width), -1, np.int32)
        for source_id, ids in enumerate(lists):
            table[source_id, : len(ids)] = ids
        settings = {name: int(value) if value.isdigit() else value for name, value in header.items()
                    if name in ("per_source", "frequent", "min_count")}
        try:
            return cls(table, always, target_size, settings)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    # -- queries ------------------------------------------------------------

    def candidates(self, source_ids, extra_ids=None, multiple=None, pad_id=PAD_ID):
        """The sorted target ids a batch may produce, and their count.

        Args:
            source_ids: the batch's source ids (any shape, or rows of
                differing lengths; pad and other special ids add nothing
                unless the table lists pieces for them).
            extra_ids: ids that must be kept too (a forced prefix's).
            multiple: the result is padded with `pad_id` to a multiple of
                this many entries (fewer distinct shapes to compile); the
                padding entries lie after the first `count`. Default: 128
                for a target vocabulary of 2,048 pieces or more, else 8.

        Returns:
            (ids, count): int32 ids of length a multiple of `multiple`
            (capped at the target vocabulary), `count` of them real.
        """
        if multiple is None:
            multiple = default_multiple(self.target_vocabulary_size)
        _check_count("multiple", multiple, 1)
        source_ids = _flat_ids(source_ids)
        if source_ids.size and (source_ids.min() < 0 or source_ids.max() >= self.source_vocabulary_size):
            raise ValueError(f"source ids must lie in [0, {self.source_vocabulary_size}) (the shortlist's source "
                             f"vocabulary), got {source_ids.min()}..{source_ids.max()}.")
        rows = self.table[np.unique(source_ids)].reshape(-1)
        parts = [rows[rows >= 0], self.always]
        if extra_ids is not None:
            extra = _flat_ids(extra_ids)
            if extra.size and (extra.min() < 0 or extra.max() >= self.target_vocabulary_size):
                raise ValueError(f"extra ids must lie in [0, {self.target_vocabulary_size}), "
                                 f"got {extra.min()}..{extra.max()}.")
            parts.append(extra)
        ids = np.unique(np.concatenate(parts).astype(np.int32))
        count = len(ids)
        width = min(-(-count // multiple) * multiple, max(self.target_vocabulary_size, count))
        padded = np.full(width, pad_id, np.int32)
        padded[:count] = ids
        return padded, count

    def ctranslate2_vmap(self, source_pieces, target_pieces):
        """The lines of a CTranslate2 `vmap.txt` holding the same lists:
        "source_piece<TAB>target pieces" per source piece, and a first line
        with an empty source piece for the pieces always kept (CTranslate2
        adds the targets of the empty key to every batch)."""
        lines = ["\t" + " ".join(target_pieces[i] for i in self.always if i not in SPECIAL_IDS)]
        for source_id, row in enumerate(self.table):
            ids = row[row >= 0]
            if ids.size and source_id not in SPECIAL_IDS:
                lines.append(source_pieces[source_id] + "\t" + " ".join(target_pieces[i] for i in ids))
        return lines
