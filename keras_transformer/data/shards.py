"""Shards of token ids on disk: what `prepare` writes and training reads.

A shard holds the token ids of consecutive sentence pairs in two raw
little-endian files:

    NAME.tokens   ids: pair 0's source, pair 0's target, pair 1's source, ...
    NAME.index    int64 rows (start in .tokens, source length, target length)

Why raw arrays and not TFRecord, `tf.data.Dataset.save` or ArrayRecord:
training reads pairs by index, in an order computed from the step
(`batch_plan`), so that a resumed run reads nothing before its step and
every worker reads only its own pairs. TFRecord and `Dataset.save` files are
read in sequence (reaching pair N means reading the N before it: the replay
this format removes). ArrayRecord gives random access through Grain, whose
loader feeds Keras only as an iterator of NumPy batches, the same thing the
generator in `streaming` is, with two more dependencies.

Reading: the index rows of every pair are held in memory (`ShardSet` loads
them once, 8 to 12 bytes a pair: 36 MB at 4.5 million pairs), so a batch
is its pairs' token spans only: sorted by position, spans that touch or lie
within a page of each other are read together with one `pread`, and the
batch's arrays are filled by NumPy indexing, not pair by pair. A memory map
was tried first: its pages count in the process's resident memory once
touched (64 batches of random pairs of the 4.5-million-pair corpus added
451 MB); `pread` into the batch's arrays keeps memory flat.
"""

import hashlib
import os

import numpy as np

from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID

TOKENS_SUFFIX = ".tokens"
INDEX_SUFFIX = ".index"
_INDEX_COLUMNS = 3


def token_dtype(vocabulary_size):
    """The smallest dtype that holds every id: uint16 up to 65,536 pieces."""
    return "<u2" if vocabulary_size <= 2**16 else "<i4"


class ShardError(ValueError):
    """A shard is missing, truncated or damaged; the message names the file."""


def file_sha256(path, chunk_bytes=1 << 22):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


class ShardWriter:
    """Writes one shard; `append` takes a chunk of pairs, `close` returns its manifest entry."""

    def __init__(self, directory, name, dtype):
        self.name = name
        self.dtype = np.dtype(dtype)
        self._paths = {suffix: os.path.join(directory, name + suffix) for suffix in (TOKENS_SUFFIX, INDEX_SUFFIX)}
        self._files = {suffix: open(path, "wb") for suffix, path in self._paths.items()}
        self._digests = {suffix: hashlib.sha256() for suffix in self._paths}
        self.pairs = 0
        self.tokens = 0

    def _write(self, suffix, array):
        data = array.tobytes()
        self._files[suffix].write(data)
        self._digests[suffix].update(data)

    def append(self, sources, targets):
        """Adds pairs: `sources` and `targets` are lists of id lists."""
        source_lengths = np.fromiter(map(len, sources), np.int64, len(sources))
        target_lengths = np.fromiter(map(len, targets), np.int64, len(targets))
        sizes = source_lengths + target_lengths
        starts = self.tokens + np.cumsum(sizes) - sizes
        total = int(sizes.sum())
        flat = np.empty(total, self.dtype)
        position = 0
        for source, target in zip(sources, targets):
            end = position + len(source)
            flat[position:end] = source
            position, end = end, end + len(target)
            flat[position:end] = target
            position = end
        self._write(TOKENS_SUFFIX, flat)
        self._write(INDEX_SUFFIX, np.stack([starts, source_lengths, target_lengths], axis=1).astype("<i8"))
        self.pairs += len(sources)
        self.tokens += total

    def close(self):
        for handle in self._files.values():
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
        return {
            "name": self.name,
            "pairs": self.pairs,
            "tokens": self.tokens,
            "sha256": {suffix.lstrip("."): digest.hexdigest() for suffix, digest in self._digests.items()},
        }

    def abort(self):
        for handle in self._files.values():
            handle.close()
        for path in self._paths.values():
            if os.path.exists(path):
                os.remove(path)


def shard_files(directory, entry):
    """`{"tokens": path, "index": path}` of a manifest's shard entry."""
    return {suffix.lstrip("."): os.path.join(directory, entry["name"] + suffix) for suffix in (TOKENS_SUFFIX,
                                                                                               INDEX_SUFFIX)}


def file_stat(path):
    """`[size, modification time in ns]`: what a quick check compares."""
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns]


def check_file(path, size, sha256, stat=None, checksums=True):
    """Raises `ShardError` naming `path` if it is missing, not `size` bytes, or its SHA-256
    is not `sha256`. With `checksums="changed"`, the SHA-256 is computed only when the
    file's `[size, mtime_ns]` differs from `stat` (recorded when it was written) or none
    was recorded: a file rewritten in place gets a new modification time."""
    if not os.path.isfile(path):
        raise ShardError(f"{path}: missing")
    now = file_stat(path)
    if now[0] != size:
        raise ShardError(f"{path}: {now[0]} bytes, the manifest says {size} (truncated or damaged)")
    if checksums == "changed":
        checksums = stat is None or list(stat) != now
    if checksums and file_sha256(path) != sha256:
        raise ShardError(f"{path}: its SHA-256 differs from the manifest's (damaged)")


def verify_shard(directory, entry, dtype, checksums=True, stats=None):
    """Raises `ShardError` naming the file if a shard's files are missing,
    of the wrong size, or differ from their SHA-256 (every time with
    `checksums=True`; with "changed", only those whose size and modification
    time differ from `stats[file name]`; never with False)."""
    expected_bytes = {"tokens": entry["tokens"] * np.dtype(dtype).itemsize,
                      "index": entry["pairs"] * _INDEX_COLUMNS * 8}
    for kind, path in shard_files(directory, entry).items():
        check_file(path, expected_bytes[kind], entry["sha256"][kind], (stats or {}).get(os.path.basename(path)),
                   checksums)


_PAGE_BYTES = 4096  # spans closer than this are read together: the page is read anyway


class ShardSet:
    """The shards of a prepared corpus, read by global pair number.

    Pair numbers run over the shards in manifest order. `batch` gathers
    pairs into the training convention's padded arrays; it may be called
    from several threads at once.
    """

    def __init__(self, directory, entries, dtype):
        self.dtype = np.dtype(dtype)
        sizes = np.array([entry["pairs"] for entry in entries], np.int64)
        self._firsts = np.concatenate([[0], np.cumsum(sizes)])
        self.num_pairs = int(self._firsts[-1])
        longest_shard = max([entry["tokens"] for entry in entries], default=0)
        start_type = np.uint32 if longest_shard < 2**32 else np.int64
        self._starts = np.empty(self.num_pairs, start_type)  # in the pair's shard
        self._lengths = np.empty((self.num_pairs, 2), np.uint16)  # widened if a pair needs it
        self._files = []
        try:
            for entry, first in zip(entries, self._firsts.tolist()):
                paths = shard_files(directory, entry)
                rows = np.fromfile(paths["index"], "<i8").reshape(-1, _INDEX_COLUMNS)
                if len(rows) != entry["pairs"]:
                    raise ShardError(f"{paths['index']}: {len(rows)} pairs, the manifest says {entry['pairs']}")
                if rows[:, 1:].max(initial=0) > np.iinfo(self._lengths.dtype).max:
                    self._lengths = self._lengths.astype(np.int64)
                self._starts[first:first + len(rows)] = rows[:, 0]
                self._lengths[first:first + len(rows)] = rows[:, 1:]
                descriptor = os.open(paths["tokens"], os.O_RDONLY)
                self._files.append(descriptor)
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_RANDOM)  # batches gather from all over the file
        except BaseException:
            self.close()
            raise

    def rows(self, pair_ids):
        """Index rows `(start, source length, target length)` of `pair_ids`,
        and the shard each lies in."""
        pair_ids = np.asarray(pair_ids, np.int64)
        if pair_ids.size and (pair_ids.min() < 0 or pair_ids.max() >= self.num_pairs):
            raise IndexError(f"pair ids must lie in [0, {self.num_pairs}), got {pair_ids.min()}..{pair_ids.max()}")
        shard_of = np.searchsorted(self._firsts, pair_ids, side="right") - 1
        rows = np.empty((pair_ids.size, _INDEX_COLUMNS), np.int64)
        rows[:, 0] = self._starts[pair_ids]
        rows[:, 1:] = self._lengths[pair_ids]
        return rows, shard_of

    def _gather(self, rows, shard_of):
        """The tokens of every pair, one after another, and where each pair's begin in them."""
        itemsize = self.dtype.itemsize
        sizes = rows[:, 1] + rows[:, 2]
        # Sorted by (shard, start), a pair's span begins where the last one read ended, or a
        # new read starts: one per run of spans that touch or lie within a page of each other.
        order = np.lexsort((rows[:, 0], shard_of))
        shard, start, size = shard_of[order], rows[order, 0], sizes[order]
        end = start + size
        gap = np.ones(len(order), bool)  # pairs' spans never overlap: the one before ends first
        gap[1:] = (shard[1:] != shard[:-1]) | ((start[1:] - end[:-1]) * itemsize > _PAGE_BYTES)
        read_first = np.flatnonzero(gap)
        read_end = np.maximum.reduceat(end, read_first) if len(order) else end
        read_start = start[read_first]
        chunks = [os.pread(self._files[s], itemsize * int(n), itemsize * int(o))
                  for s, o, n in zip(shard[read_first].tolist(), read_start.tolist(),
                                     (read_end - read_start).tolist())]
        tokens = np.frombuffer(b"".join(chunks), self.dtype)
        read_base = np.concatenate([[0], np.cumsum(read_end - read_start)[:-1]]).astype(np.int64)
        run = np.cumsum(gap) - 1
        offsets = np.empty(len(order), np.int64)
        offsets[order] = read_base[run] + start - read_start[run]
        return tokens, offsets

    def pairs(self, pair_ids):
        """`[(source ids, target ids), ...]` of `pair_ids` (tests, inspection)."""
        rows, shard_of = self.rows(pair_ids)
        tokens, offsets = self._gather(rows, shard_of)
        out = []
        for offset, source_length, target_length in zip(offsets.tolist(), rows[:, 1].tolist(), rows[:, 2].tolist()):
            pair = tokens[offset:offset + source_length + target_length].tolist()
            out.append((pair[:source_length], pair[source_length:]))
        return out

    def batch(self, pair_ids, width):
        """`(source, decoder input, labels)` int32 arrays of shape
        `(len(pair_ids), width)`: `source + [eos]`, `[bos] + target` and
        `target + [eos]`, padded with pad. Every pair must fit `width`."""
        rows, shard_of = self.rows(pair_ids)
        size = len(rows)
        source_lengths, target_lengths = rows[:, 1], rows[:, 2]
        if size and max(source_lengths.max(), target_lengths.max()) + 1 > width:
            raise ValueError(f"a pair is longer than the batch width {width}")
        tokens, offsets = self._gather(rows, shard_of)
        columns = np.arange(width)
        source = np.full((size, width), PAD_ID, np.int32)
        target = np.full((size, width), PAD_ID, np.int32)
        taken = columns < source_lengths[:, None]
        source[taken] = tokens[(offsets[:, None] + columns)[taken]]
        taken = columns < target_lengths[:, None]
        target[taken] = tokens[(offsets[:, None] + source_lengths[:, None] + columns)[taken]]
        everyone = np.arange(size)
        source[everyone, source_lengths] = EOS_ID
        labels = target.copy()
        labels[everyone, target_lengths] = EOS_ID
        decoder_input = np.full((size, width), PAD_ID, np.int32)
        decoder_input[:, 0] = BOS_ID
        decoder_input[:, 1:] = target[:, :-1]
        return source, decoder_input, labels

    def close(self):
        for descriptor in self._files:
            os.close(descriptor)
        self._files = []
