"""A prepared version's manifest (the layout: `prepare.py`'s docstring): reading it, which
version is current, what its content is, whether it still describes its inputs and
settings, and whether its files are intact; the atomic writes and file stats it rests on.
No TensorFlow here.
"""

import hashlib
import json
import os
import time

from keras_transformer.data.shards import ShardError, check_file, file_sha256, file_stat, verify_shard

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
CURRENT_FILE = "current"
TOKENIZER_FILE = "tokenizer.model"
LENGTHS_FILE = "lengths.u16"


def fingerprint(path, checksum=True):
    stat = os.stat(path)
    record = {"path": os.path.abspath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if checksum:
        record["sha256"] = file_sha256(path)
    return record


def atomic_write(path, data):
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def read_manifest(directory):
    """The manifest of a prepared directory (of its current version), or None if it has none
    (or an unreadable one)."""
    directory = current_version(directory) or directory
    path = os.path.join(directory, MANIFEST_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT_VERSION else None


def content_sha256(manifest):
    """A digest of what a prepared directory holds (tokenizer, shards, counts), not of how
    or when it was made: two preparations of the same content have the same one."""
    content = {key: manifest.get(key) for key in ("format", "tokenizer_sha256", "token_dtype", "shards",
                                                  "lengths_sha256")}
    content["pairs"] = manifest["counts"]["pairs"]
    return sha256_of(json.dumps(content, sort_keys=True).encode())


# Settings that a later version calls by another name (the same setting, so not a change).
_RENAMED_SETTINGS = {"training.seed": "data.tokenizer_seed"}


def _renamed_settings(settings):
    return {_RENAMED_SETTINGS.get(key, key): value for key, value in settings.items()}


def why_stale(manifest, inputs, settings, tokenizer_sha256):
    """Why `manifest` does not describe these inputs and settings (None: it does).

    An input whose size and modification time are unchanged is taken as
    unchanged; one whose stat changed is compared by SHA-256 (a copy or a
    `touch` is not a change)."""
    before = _renamed_settings(manifest["settings"])
    if before != settings:
        changed = [f"{key} {before.get(key)!r} -> {settings.get(key)!r}"
                   for key in sorted(set(before) | set(settings)) if before.get(key) != settings.get(key)]
        return "the settings changed since the data was prepared: " + "; ".join(changed)
    if tokenizer_sha256 is not None and manifest["tokenizer_sha256"] != tokenizer_sha256:
        return "the data was prepared with another tokenizer"
    recorded = manifest["inputs"]
    if [record["path"] for record in recorded] != [os.path.abspath(path) for path in inputs]:
        return (f"the inputs changed: {', '.join(inputs)} (prepared from "
                f"{', '.join(record['path'] for record in recorded)})")
    for path, record in zip(inputs, recorded):
        now = fingerprint(path, checksum=False)
        if (now["size"], now["mtime_ns"]) == (record["size"], record["mtime_ns"]):
            continue
        if file_sha256(path) != record["sha256"]:
            return (f"{path} changed since it was prepared ({record['size']:,} bytes then, "
                    f"{now['size']:,} now; its SHA-256 differs)")
    return None


def verify(directory, manifest, checksums=True):
    """Raises `ShardError` naming the first missing or damaged file.

    `checksums`: True computes every file's SHA-256; "changed" only those of files whose
    size or modification time differs from the manifest's `file_stats` (all of them in a
    manifest without: one written before it recorded them); False none."""
    stats = manifest.get("file_stats", {})
    # Data prepared with an `encoder` lists its tokenizer's files; otherwise it is one SentencePiece model.
    for name, sha256 in manifest.get("tokenizer_files", {TOKENIZER_FILE: manifest["tokenizer_sha256"]}).items():
        tokenizer = os.path.join(directory, name)
        if not os.path.isfile(tokenizer) or file_sha256(tokenizer) != sha256:  # small: always checked
            raise ShardError(f"{tokenizer}: missing or not the tokenizer the data was prepared with")
    lengths = os.path.join(directory, LENGTHS_FILE)
    if not os.path.isfile(lengths) or os.path.getsize(lengths) != 2 * manifest["counts"]["pairs"]:
        raise ShardError(f"{lengths}: missing or of the wrong size")
    # Manifests before format 1's lengths_sha256 have none: their lengths are checked by size only.
    if "lengths_sha256" in manifest:
        check_file(lengths, 2 * manifest["counts"]["pairs"], manifest["lengths_sha256"], stats.get(LENGTHS_FILE),
                   checksums)
    for entry in manifest["shards"]:
        verify_shard(directory, entry, manifest["token_dtype"], checksums=checksums, stats=stats)


def current_version(directory):
    """The directory of the current version of the prepared `directory` (see the module
    docstring), or None if there is none yet."""
    directory = os.fspath(directory)
    try:
        with open(os.path.join(directory, CURRENT_FILE), encoding="utf-8") as handle:
            return os.path.join(directory, handle.read().strip())
    except FileNotFoundError:
        pass
    # Prepared before versions: the files lie in the directory itself.
    return directory if os.path.isfile(os.path.join(directory, MANIFEST_FILE)) else None


def sha256_of(data):
    return hashlib.sha256(data).hexdigest()


_CLOCK_TICK_NS = 50_000_000  # longer than a coarse file-time tick (1-10 ms)


def file_stats(directory, names):
    """`{name: [size, mtime_ns]}` of finished files, for the quick check at start. A file
    changed within the clock tick of its last write would keep its modification time, so
    the stats are taken once that tick has passed (git's "racy clean" case)."""
    newest = max(os.stat(os.path.join(directory, name)).st_mtime_ns for name in names)
    wait_ns = newest + _CLOCK_TICK_NS - time.time_ns()
    if wait_ns > 0:
        time.sleep(wait_ns / 1e9)
    return {name: file_stat(os.path.join(directory, name)) for name in names}
