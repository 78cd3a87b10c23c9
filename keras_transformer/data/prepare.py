"""Prepare once: a corpus turned into a tokenizer and shards of token ids.

A prepared directory holds versions, each complete and never changed once
in place, so that a run reading one is never pulled from under it:

    current          the name of the current version (replaced atomically)
    v1/, v2/, ...    the versions, as below (older ones stay for the runs
                     trained on them: delete one when no run needs it)
    .lock            held (fcntl) by the process preparing: another waits,
                     then finds the new version up to date
    .building-KEY/   a version being made, renamed into place when complete;
                     KEY digests the inputs and settings, so that a killed
                     preparation of the same ones resumes from its finished
                     shards (listed in its progress.json)

(a directory prepared before versions holds one version's files itself).
A version holds:

    manifest.json    inputs (path, size, mtime, SHA-256), the settings that
                     decide the content, the tokenizer's SHA-256 (and, with
                     an `encoder`, each of its files'), counts,
                     the shards with their SHA-256, and every file's size and
                     modification time (written last: a directory without it
                     was not finished)
    tokenizer.model  the SentencePiece model (or, with an `encoder`, the
                     files it names: an imported Marian run's tokenizer)
    lengths.u16      per pair, max(source, target) + 1 tokens: what bucketing
                     needs, without reading the shards (its SHA-256 in the manifest)
    shard-NNNNN.*    token ids (see `shards`)

`prepare` streams the corpus (it never holds it): one pass samples pairs
for the tokenizer (reservoir sampling, seeded), a second tokenizes them in
chunks on all cores (SentencePiece's own threads) into shards of
`pairs_per_shard` pairs, in this process or, with `processes`, in several
(each tokenizing and writing whole shards; the shards are the same bytes).
Called again it does nothing when the inputs and settings are unchanged and
the shards intact: a start checks every file's size and modification time
against the manifest's and computes the SHA-256 only of a file whose stat
changed (a copy, or one rewritten in place), so that it takes seconds at
any size; `verify=True` (`keras-transformer prepare --verify`) checks every
SHA-256. A changed input, setting or
tokenizer is named in the message, and the data is prepared again (or, with
`on_change="error"`, a `PrepareError` says so); a damaged shard is named and
the shards are written again from the same inputs and tokenizer, which
gives the same bytes. Either way the result is a new version.

No TensorFlow here: the tokenizer is trained through a callable, and a
tokenizer other than one SentencePiece model comes as an `encoder` (see
`prepare`) that encodes in plain Python.
"""

import concurrent.futures
import contextlib
import dataclasses
import fcntl
import hashlib
import itertools
import json
import multiprocessing
import os
import random
import re
import shutil
import time

import numpy as np

from keras_transformer.data.manifest import (  # noqa: F401 (content_sha256: this module's API too)
    CURRENT_FILE,
    FORMAT_VERSION,
    LENGTHS_FILE,
    MANIFEST_FILE,
    TOKENIZER_FILE,
    atomic_write,
    content_sha256,
    current_version,
    file_stats,
    fingerprint,
    read_manifest,
    sha256_of,
    verify,
    why_stale,
)
from keras_transformer.data.shards import (
    ShardError, ShardSet, ShardWriter, check_file, file_stat, shard_files, token_dtype,
)

LOCK_FILE = ".lock"
_BUILDING_PREFIX = ".building-"
_VERSION_NAME = re.compile(r"v[0-9]+")
PROGRESS_FILE = "progress.json"  # in a version being made: its finished shards
_SHARD_LENGTHS_SUFFIX = ".lengths"  # a finished shard's part of lengths.u16, joined at the end
_MAX_LENGTH = 2**16 - 1  # lengths.u16 saturates here: such pairs fit no bucket
_CHUNK_PAIRS = 8192


class PrepareError(ValueError):
    """The prepared data cannot be used or made; the message names the file or setting."""


@dataclasses.dataclass
class Prepared:
    """A prepared directory and its manifest; `action` says what `prepare` did."""

    directory: str
    manifest: dict
    action: str

    @property
    def tokenizer_path(self):
        return os.path.join(self.directory, TOKENIZER_FILE)

    @property
    def num_pairs(self):
        return self.manifest["counts"]["pairs"]

    def lengths(self):
        """Per pair, the padded length it needs (uint16)."""
        return np.fromfile(os.path.join(self.directory, LENGTHS_FILE), "<u2")

    def shards(self):
        return ShardSet(self.directory, self.manifest["shards"], self.manifest["token_dtype"])


def reservoir_sample(pairs, size, seed):
    """`size` pairs drawn uniformly from a stream, in stream order (all of
    them, in order, when the stream is shorter)."""
    rng = random.Random(seed)
    sample = []
    for index, pair in enumerate(pairs):
        if index < size:
            sample.append((index, pair))
        else:
            slot = rng.randrange(index + 1)
            if slot < size:
                sample[slot] = (index, pair)
    sample.sort(key=lambda item: item[0])
    return [pair for _, pair in sample]


@contextlib.contextmanager
def _locked(directory):
    """Holds the directory's lock (one preparation at a time: another waits, then finds it done)."""
    with open(os.path.join(directory, LOCK_FILE), "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare(directory, *, inputs, open_pairs, settings, tokenizer_proto=None, train_tokenizer=None,
            sample_pairs=500_000, seed=0, pairs_per_shard=1_000_000, on_change="rebuild", log=print,
            num_threads=None, build=True, encoder=None, verify=False, processes=1):
    """Prepares (or checks) `directory`; returns a `Prepared` (its `directory` is the version's).

    Args:
        inputs: the corpus files (fingerprinted in the manifest).
        open_pairs: `open_pairs()` -> a fresh stream of `(source, target)`
            strings with a `stats` attribute after the pass (a `ParallelCorpus`).
        settings: a JSON-able dict of everything else that decides the
            content (reader options, tokenizer options).
        tokenizer_proto: the serialized SentencePiece model to use, or None
            to train one with `train_tokenizer(sample) -> proto`.
        sample_pairs: at most this many pairs (drawn uniformly) train the tokenizer.
        pairs_per_shard: pairs per shard.
        on_change: "rebuild" prepares again when an input, setting or the
            tokenizer changed; "error" raises `PrepareError` instead.
        build: if False, only check: `PrepareError` unless the directory is
            prepared and up to date (a worker waiting for the chief's).
        encoder: instead of `tokenizer_proto`, a tokenizer that is not one
            SentencePiece model (two, with a vocabulary: an imported Marian
            run's): an object with `files` ({file name: bytes}, written into
            the version), `sha256` (of those files: it decides staleness as
            the proto's does), `vocabulary_size`, and `encode_sources(texts)`
            / `encode_targets(texts)` -> a list of id lists each (no EOS).
        verify: check every file's SHA-256, not only those whose size or
            modification time changed.
        processes: processes that tokenize and write shards side by side
            (each with its share of `num_threads`); with an `encoder`, 1.
    """
    if on_change not in ("rebuild", "error"):
        raise ValueError(f"on_change must be 'rebuild' or 'error', got {on_change!r}")
    if encoder is not None:
        if tokenizer_proto is not None:
            raise ValueError("prepare takes tokenizer_proto or encoder, not both")
    elif tokenizer_proto is None and train_tokenizer is None:
        raise ValueError("prepare needs tokenizer_proto, encoder or train_tokenizer")
    if isinstance(pairs_per_shard, bool) or not isinstance(pairs_per_shard, int) or pairs_per_shard < 1:
        raise ValueError(f"pairs_per_shard must be a positive integer, got {pairs_per_shard!r}")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be a positive integer, got {processes!r}")
    for path in inputs:
        if not os.path.isfile(path):
            raise PrepareError(f"{path}: no such corpus file")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    # Versions are never changed once in place and `current` is replaced atomically: a check
    # needs no lock, a preparation holds it from its check to its new version.
    with _locked(directory) if build else contextlib.nullcontext():
        return _prepare_locked(directory, inputs, open_pairs, settings, tokenizer_proto, train_tokenizer,
                               sample_pairs, seed, pairs_per_shard, on_change, log, num_threads, build, encoder,
                               verify, processes)


def _prepare_locked(directory, inputs, open_pairs, settings, tokenizer_proto, train_tokenizer, sample_pairs, seed,
                    pairs_per_shard, on_change, log, num_threads, build, encoder, full_verify, processes):
    tokenizer_sha256 = encoder.sha256 if encoder is not None else (
        None if tokenizer_proto is None else sha256_of(tokenizer_proto))
    current = current_version(directory)
    manifest = None if current is None else read_manifest(current)
    if manifest is None and not build:
        raise PrepareError(f"{directory}: not prepared (no {MANIFEST_FILE})")
    if manifest is not None:
        reason = why_stale(manifest, inputs, settings, tokenizer_sha256)
        if reason is None:
            try:
                verify(current, manifest, checksums=True if full_verify else "changed")
                return Prepared(current, manifest, "up to date")
            except ShardError as error:
                if not build:
                    raise PrepareError(str(error)) from None
                log(f"prepare: {error}; writing the shards again from the same inputs and tokenizer "
                    f"(a new version; {current} stays for any run reading it)")
                if tokenizer_proto is None and encoder is None:
                    with open(os.path.join(current, TOKENIZER_FILE), "rb") as handle:
                        kept = handle.read()
                    if sha256_of(kept) == manifest["tokenizer_sha256"]:
                        tokenizer_proto = kept
        else:
            if on_change == "error" or not build:
                raise PrepareError(f"{directory}: {reason}.")
            log(f"prepare: {reason}; preparing {directory} again (a new version; {current} stays for any run "
                "reading it)")
    fingerprints = [fingerprint(path) for path in inputs]
    key = sha256_of(json.dumps({"format": FORMAT_VERSION, "inputs": fingerprints, "settings": settings,
                              "tokenizer_sha256": encoder.sha256 if encoder is not None else (
                                  None if tokenizer_proto is None else sha256_of(tokenizer_proto)),
                              "pairs_per_shard": pairs_per_shard}, sort_keys=True).encode())[:16]
    private = os.path.join(directory, _BUILDING_PREFIX + key)
    for name in os.listdir(directory):  # left by a killed preparation of other inputs: the lock is ours
        if name.startswith(_BUILDING_PREFIX) and name != os.path.basename(private):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    umask = os.umask(0)
    os.umask(umask)
    os.makedirs(private, exist_ok=True)
    os.chmod(private, 0o777 & ~umask)  # a private folder, but other users' workers read it once in place
    prepared = _build(private, fingerprints, open_pairs, settings, tokenizer_proto, train_tokenizer, sample_pairs,
                      seed, pairs_per_shard, log, num_threads, encoder, processes)
    names = [name for name in os.listdir(directory) if _VERSION_NAME.fullmatch(name)]
    name = f"v{1 + max((int(n[1:]) for n in names), default=0)}"
    # A failed preparation leaves its folder: the next one of the same inputs resumes from its shards.
    os.rename(private, os.path.join(directory, name))
    atomic_write(os.path.join(directory, CURRENT_FILE), name.encode())
    return Prepared(os.path.join(directory, name), prepared.manifest, prepared.action)


class _SentencePieceEncoder:
    """`prepare`'s encoder of one SentencePiece model (both sides), on all cores."""

    def __init__(self, proto, num_threads):
        import sentencepiece

        self.files = {TOKENIZER_FILE: proto}
        self.sha256 = sha256_of(proto)
        self._processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        self.vocabulary_size = self._processor.get_piece_size()
        self._threads = num_threads

    def encode_sources(self, texts):
        return self._processor.encode(texts, num_threads=self._threads)

    encode_targets = encode_sources


def _read_progress(directory):
    """The finished shards of a version being made whose files are still as written:
    `{name: entry}` (see `_write_shard`)."""
    try:
        with open(os.path.join(directory, PROGRESS_FILE), encoding="utf-8") as handle:
            shards = json.load(handle)["shards"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    finished = {}
    for name, entry in shards.items():
        try:
            for kind, path in shard_files(directory, entry).items():
                check_file(path, entry["bytes"][kind], entry["sha256"][kind], entry["stats"][kind], "changed")
            check_file(os.path.join(directory, name + _SHARD_LENGTHS_SUFFIX), 2 * entry["pairs"],
                       entry["lengths_sha256"], entry["stats"]["lengths"], "changed")
        except (ShardError, KeyError, TypeError):
            continue
        finished[name] = entry
    return finished


def _write_shard(directory, name, encoder, chunks, dtype):
    """Tokenizes the pairs of `chunks` (lists of pairs) into shard `name` and its part of
    lengths.u16; returns its progress entry (the manifest's shard entry and what resuming checks)."""
    writer = ShardWriter(directory, name, dtype)
    lengths_path = os.path.join(directory, name + _SHARD_LENGTHS_SUFFIX)
    lengths_digest = hashlib.sha256()
    try:
        with open(lengths_path, "wb") as lengths_file:
            for chunk in chunks:
                sources = encoder.encode_sources([source for source, *_ in chunk])
                targets = encoder.encode_targets([target for _, target, *_ in chunk])
                lengths = np.minimum(
                    np.maximum(np.fromiter(map(len, sources), np.int64, len(chunk)),
                               np.fromiter(map(len, targets), np.int64, len(chunk))) + 1, _MAX_LENGTH)
                data = lengths.astype("<u2").tobytes()
                lengths_file.write(data)
                lengths_digest.update(data)
                writer.append(sources, targets)
            lengths_file.flush()
            os.fsync(lengths_file.fileno())
    except BaseException:
        writer.abort()
        raise
    entry = writer.close()
    paths = shard_files(directory, entry)
    entry["bytes"] = {kind: os.path.getsize(path) for kind, path in paths.items()}
    entry["stats"] = {**{kind: file_stat(path) for kind, path in paths.items()}, "lengths": file_stat(lengths_path)}
    entry["lengths_sha256"] = lengths_digest.hexdigest()
    return entry


_process_encoder = None  # a `prepare` process's encoder, made once


def _write_shard_in_process(directory, name, proto, num_threads, pairs, dtype):
    global _process_encoder
    if _process_encoder is None or _process_encoder.sha256 != sha256_of(proto):
        _process_encoder = _SentencePieceEncoder(proto, num_threads)
    chunks = (pairs[start:start + _CHUNK_PAIRS] for start in range(0, len(pairs), _CHUNK_PAIRS))
    return _write_shard(directory, name, _process_encoder, chunks, dtype)


def _build(directory, fingerprints, open_pairs, settings, tokenizer_proto, train_tokenizer, sample_pairs, seed,
           pairs_per_shard, log, num_threads, encoder=None, processes=1):
    started = time.time()
    inputs = [record["path"] for record in fingerprints]
    trained = tokenizer_proto is None and encoder is None
    finished = _read_progress(directory)
    if trained and os.path.isfile(os.path.join(directory, TOKENIZER_FILE)):
        # A resumed preparation: the tokenizer it trained (written whole, before any shard).
        with open(os.path.join(directory, TOKENIZER_FILE), "rb") as handle:
            tokenizer_proto = handle.read()
    elif trained:
        finished = {}
        sample = reservoir_sample(open_pairs(), sample_pairs, seed)
        if not sample:
            raise PrepareError(f"{', '.join(inputs)}: no usable sentence pairs")
        tokenizer_started = time.time()
        tokenizer_proto = train_tokenizer(sample)
        log(f"prepare: tokenizer trained on {len(sample):,} pairs in {time.time() - tokenizer_started:.0f}s")
        del sample
    if finished:
        log(f"prepare: resuming {directory}: {len(finished)} shards were finished ({', '.join(sorted(finished))})")
    tokenizer_files = None if encoder is None else {name: sha256_of(data) for name, data in encoder.files.items()}
    threads = num_threads or os.cpu_count() or 1
    if encoder is None:
        encoder = _SentencePieceEncoder(tokenizer_proto, max(1, threads // processes))
    else:
        processes = 1  # an encoder of its own kind is not sent to other processes
    for name, data in encoder.files.items():
        atomic_write(os.path.join(directory, name), data)
    dtype = token_dtype(encoder.vocabulary_size)

    def record(name, entry):
        finished[name] = entry
        atomic_write(os.path.join(directory, PROGRESS_FILE), json.dumps({"shards": finished}).encode())

    corpus = open_pairs()
    iterator = iter(corpus)
    # Forked, the processes start at once (spawned, each would import Keras and TensorFlow for
    # seconds); they run NumPy, SentencePiece and file writes only, none of what another thread
    # of this process may hold.
    pool = None if processes == 1 else concurrent.futures.ProcessPoolExecutor(
        processes, mp_context=multiprocessing.get_context(
            "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"))
    pending = {}
    try:
        for index in itertools.count():
            name = f"shard-{index:05d}"
            first = list(itertools.islice(iterator, min(_CHUNK_PAIRS, pairs_per_shard)))
            if not first:
                break
            rest = itertools.islice(iterator, pairs_per_shard - len(first))
            if name in finished:
                for _ in rest:  # read past it: its pairs are in its files
                    pass
            elif pool is None:
                chunks = itertools.chain([first], iter(lambda: list(itertools.islice(rest, _CHUNK_PAIRS)), []))
                record(name, _write_shard(directory, name, encoder, chunks, dtype))
            else:
                while len(pending) >= processes:  # bounds the pairs held while others tokenize
                    done, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                    for future in done:
                        record(pending.pop(future), future.result())
                pending[pool.submit(_write_shard_in_process, directory, name, tokenizer_proto,
                                    encoder._threads, first + list(rest), dtype)] = name
        for future in concurrent.futures.as_completed(pending):
            record(pending[future], future.result())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    names = [f"shard-{index:05d}" for index in range(len(finished))]
    if sorted(finished) != names:  # the corpus ended before a shard the progress lists: not these inputs
        raise PrepareError(f"{directory}: {PROGRESS_FILE} lists shards the corpus does not make; delete the folder")
    shards = [{key: finished[name][key] for key in ("name", "pairs", "tokens", "sha256")} for name in names]
    pairs = sum(entry["pairs"] for entry in shards)
    if not pairs:
        raise PrepareError(f"{', '.join(inputs)}: no usable sentence pairs ({corpus.stats})")
    lengths_path = os.path.join(directory, LENGTHS_FILE)
    lengths_digest = hashlib.sha256()
    length_counts = np.zeros(_MAX_LENGTH + 1, np.int64)
    with open(lengths_path, "wb") as lengths_file:
        for name in names:
            part = np.fromfile(os.path.join(directory, name + _SHARD_LENGTHS_SUFFIX), "<u2")
            lengths_file.write(part.tobytes())
            lengths_digest.update(part.tobytes())
            length_counts += np.bincount(part, minlength=_MAX_LENGTH + 1)
        lengths_file.flush()
        os.fsync(lengths_file.fileno())
    for name in names:
        os.remove(os.path.join(directory, name + _SHARD_LENGTHS_SUFFIX))
    os.remove(os.path.join(directory, PROGRESS_FILE))
    stats = dataclasses.asdict(corpus.stats) if hasattr(corpus, "stats") else {}
    manifest = {
        "format": FORMAT_VERSION,
        "inputs": fingerprints,
        "settings": settings,
        "tokenizer_sha256": encoder.sha256,
        **({"tokenizer_files": tokenizer_files} if tokenizer_files else {}),
        "tokenizer_trained": trained,
        "lengths_sha256": lengths_digest.hexdigest(),
        "token_dtype": dtype,
        "counts": {"pairs": pairs, "tokens": sum(entry["tokens"] for entry in shards),
                   "longest": int(np.flatnonzero(length_counts).max()), "corpus": stats,
                   # pairs per padded length, from 1 (lengths.u16 in a histogram)
                   "lengths": {str(length): int(count) for length, count in enumerate(length_counts) if count}},
        "shards": shards,
        "file_stats": file_stats(directory, [LENGTHS_FILE, *(os.path.basename(path) for entry in shards
                                                               for path in shard_files(directory, entry).values())]),
        "seconds": round(time.time() - started, 1),
    }
    atomic_write(os.path.join(directory, MANIFEST_FILE), json.dumps(manifest, indent=1).encode())
    log(f"prepare: {pairs:,} pairs, {manifest['counts']['tokens']:,} tokens in {len(shards)} shards "
        f"({manifest['seconds']:.0f}s)")
    return Prepared(directory, manifest, "prepared")
