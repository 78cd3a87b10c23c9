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
generator in `streaming` is, with two more dependencies. Reading a pair is two
`pread` calls: `benchmarks/data_scale.py` reads batches from these shards
faster than the in-memory tf.data pipeline makes them.

Memory stays flat: the files are read with `pread`, pair by pair, into the
batch's arrays. A memory map was tried first: its pages count in the
process's resident memory once touched, and with the kernel mapping the
cached pages around each one touched, 64 batches of random pairs of the
4.5-million-pair corpus added 451 MB (108 MB even when dropped after every
batch), against nothing read this way; this way makes about half as many
batches a second (650 against 1,300-1,600 there), still several times what
the in-memory tf.data pipeline makes.
"""

import hashlib
import os

import numpy as np

from keras_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

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


def verify_shard(directory, entry, dtype, checksums=True):
    """Raises `ShardError` naming the file if a shard's files are missing,
    of the wrong size, or (with `checksums`) differ from their SHA-256."""
    expected_bytes = {"tokens": entry["tokens"] * np.dtype(dtype).itemsize,
                      "index": entry["pairs"] * _INDEX_COLUMNS * 8}
    for kind, path in shard_files(directory, entry).items():
        if not os.path.isfile(path):
            raise ShardError(f"{path}: missing")
        size = os.path.getsize(path)
        if size != expected_bytes[kind]:
            raise ShardError(f"{path}: {size} bytes, the manifest says {expected_bytes[kind]} (truncated or "
                             "damaged)")
        if checksums and file_sha256(path) != entry["sha256"][kind]:
            raise ShardError(f"{path}: its SHA-256 differs from the manifest's (damaged)")


class _ShardFiles:
    """A shard's two files, read with `pread`: nothing of them stays in the process."""

    def __init__(self, directory, entry, dtype):
        paths = shard_files(directory, entry)
        self.dtype = np.dtype(dtype)
        self.tokens = os.open(paths["tokens"], os.O_RDONLY)
        self.index = os.open(paths["index"], os.O_RDONLY)
        for descriptor in (self.tokens, self.index):  # batches gather pairs from all over the file
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_RANDOM)

    def row(self, local_id):
        return np.frombuffer(os.pread(self.index, 8 * _INDEX_COLUMNS, 8 * _INDEX_COLUMNS * int(local_id)), "<i8")

    def token_span(self, start, count):
        itemsize = self.dtype.itemsize
        return np.frombuffer(os.pread(self.tokens, itemsize * int(count), itemsize * int(start)), self.dtype)

    def close(self):
        os.close(self.tokens)
        os.close(self.index)


class ShardSet:
    """The shards of a prepared corpus, read by global pair number.

    Pair numbers run over the shards in manifest order. `batch` gathers
    pairs into the training convention's padded arrays.
    """

    def __init__(self, directory, entries, dtype):
        self._shards = [_ShardFiles(directory, entry, dtype) for entry in entries]
        sizes = np.array([entry["pairs"] for entry in entries], np.int64)
        self._firsts = np.concatenate([[0], np.cumsum(sizes)])
        self.num_pairs = int(self._firsts[-1])

    def rows(self, pair_ids):
        """Index rows `(start, source length, target length)` of `pair_ids`,
        and the shard each lies in."""
        pair_ids = np.asarray(pair_ids, np.int64)
        if pair_ids.size and (pair_ids.min() < 0 or pair_ids.max() >= self.num_pairs):
            raise IndexError(f"pair ids must lie in [0, {self.num_pairs}), got {pair_ids.min()}..{pair_ids.max()}")
        shard_of = np.searchsorted(self._firsts, pair_ids, side="right") - 1
        rows = np.empty((pair_ids.size, _INDEX_COLUMNS), np.int64)
        for position, (pair_id, shard) in enumerate(zip(pair_ids.tolist(), shard_of.tolist())):
            rows[position] = self._shards[shard].row(pair_id - self._firsts[shard])
        return rows, shard_of

    def pairs(self, pair_ids):
        """`[(source ids, target ids), ...]` of `pair_ids` (tests, inspection)."""
        rows, shard_of = self.rows(pair_ids)
        out = []
        for (start, source_length, target_length), shard in zip(rows.tolist(), shard_of.tolist()):
            tokens = self._shards[shard].token_span(start, source_length + target_length).tolist()
            out.append((tokens[:source_length], tokens[source_length:]))
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
        source = np.full((size, width), PAD_ID, np.int32)
        target = np.full((size, width), PAD_ID, np.int32)
        for position, ((start, source_length, target_length), shard) in enumerate(
                zip(rows.tolist(), shard_of.tolist())):
            tokens = self._shards[shard].token_span(start, source_length + target_length)
            source[position, :source_length] = tokens[:source_length]
            target[position, :target_length] = tokens[source_length:]
        everyone = np.arange(size)
        source[everyone, source_lengths] = EOS_ID
        labels = target.copy()
        labels[everyone, target_lengths] = EOS_ID
        decoder_input = np.full((size, width), PAD_ID, np.int32)
        decoder_input[:, 0] = BOS_ID
        decoder_input[:, 1:] = target[:, :-1]
        return source, decoder_input, labels

    def close(self):
        for shard in self._shards:
            shard.close()
