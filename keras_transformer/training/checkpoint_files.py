"""Checkpoint files: atomic writes, content digests, verification, listing.

A checkpoint is a Keras `.weights.h5` file (model weights, optimizer state)
named `ckpt-<step>.weights.h5`; `latest.json` names the newest complete one.
Keras does not save the states of the layers' seed generators (dropout) in a
weights file, so they are added to the same file, under
`keras_transformer/seed_generator_states`, and restored with it: a resumed run
draws the same dropout masks as an uninterrupted one. Files are written under
a temporary name and renamed, so a crash while saving leaves the previous
checkpoint intact.

Each file records a SHA-256 digest of its contents, so a truncated,
unreadable or altered checkpoint (or one holding NaN or infinite values) is
named with the reason when it is read (`verify_checkpoint`). A missing or
unreadable `latest.json` falls back to the newest file.

Resumable fitting is in `training/resumable.py`, averaging in
`training/averaging.py`.
"""

import hashlib
import json
import os
import re
import tempfile
import warnings

import h5py
import keras
import numpy as np

LATEST_POINTER = "latest.json"
_PATTERN = re.compile(r"^ckpt-(\d+)\.weights\.h5$")


def _fsync_directory(directory):
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def atomic_write_json(path, payload):
    directory = os.path.dirname(path)
    with tempfile.NamedTemporaryFile(
        "w", dir=directory, prefix=".tmp-", suffix=".json", delete=False
    ) as handle:
        json.dump(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(handle.name, path)
    _fsync_directory(directory)


_SEED_STATES = "keras_transformer/seed_generator_states"


def _seed_generator_states(model):
    # In model-tracking order, which is the same for the same architecture.
    return [v for v in model.variables if v.name == "seed_generator_state"]


def append_seed_states(model, path):
    states = _seed_generator_states(model)
    with h5py.File(path, "a") as handle:
        group = handle.require_group(_SEED_STATES)
        for index, variable in enumerate(states):
            dataset = group.create_dataset(str(index), data=keras.ops.convert_to_numpy(variable))
            dataset.attrs["path"] = variable.path


def _restore_seed_states(model, path):
    with h5py.File(path, "r") as handle:
        if _SEED_STATES not in handle:
            return
        group = handle[_SEED_STATES]
        saved = [group[str(index)][()] for index in range(len(group))]
    states = _seed_generator_states(model)
    if len(saved) != len(states):
        raise ValueError(
            f"{path} holds {len(saved)} seed-generator states but the model has "
            f"{len(states)}: it was written by a different architecture."
        )
    for variable, value in zip(states, saved):
        variable.assign(value)


class CorruptCheckpointError(ValueError):
    """A checkpoint file cannot be used: unreadable or truncated HDF5, contents
    altered since it was written, or NaN/infinite values in it."""


class NonFiniteWeightsError(ValueError):
    """A checkpoint was not written because the model holds NaN or infinite values."""


# Root attribute of a checkpoint file: SHA-256 over its datasets (names,
# dtypes, shapes, bytes), so damage that HDF5 itself does not notice (a
# flipped bit in a weight, a deleted variable) is caught when it is read.
_DIGEST_ATTRIBUTE = "keras_transformer_sha256"


def _scan_datasets(handle):
    """`(sha256 hex digest, names of datasets holding NaN/inf)`, reading one
    dataset at a time (a checkpoint can be larger than memory allows twice)."""
    names = []

    def visit(name, item):
        if isinstance(item, h5py.Dataset):
            names.append(name)

    handle.visititems(visit)
    digest = hashlib.sha256()
    non_finite = []
    for name in sorted(names):
        array = np.asarray(handle[name][()])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        if array.dtype.kind == "O":
            digest.update(repr(array.tolist()).encode())
        else:
            digest.update(np.ascontiguousarray(array).tobytes())
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            non_finite.append(name)
    return digest.hexdigest(), non_finite


def write_digest(path):
    """Records the content digest in `path`; refuses (NonFiniteWeightsError)
    a file holding NaN or infinite values."""
    with h5py.File(path, "a") as handle:
        digest, non_finite = _scan_datasets(handle)
        if non_finite:
            raise NonFiniteWeightsError(
                f"the model holds NaN or infinite values (in {', '.join(non_finite[:3])}"
                f"{', ...' if len(non_finite) > 3 else ''})"
            )
        handle.attrs[_DIGEST_ATTRIBUTE] = digest


def verify_checkpoint(path):
    """Checks that the checkpoint file `path` is intact.

    Returns True when its contents match the digest recorded when it was
    written, False when it records none (written by an older version: only
    loading it can tell). Raises `CorruptCheckpointError`, naming the file and
    the reason, when it cannot be read (truncated, not HDF5), does not match
    its digest, or holds NaN or infinite values.
    """
    path = str(path)
    try:
        with h5py.File(path, "r") as handle:
            recorded = handle.attrs.get(_DIGEST_ATTRIBUTE)
            digest, non_finite = _scan_datasets(handle)
    except Exception as error:  # h5py raises OSError, KeyError, RuntimeError, ...
        raise CorruptCheckpointError(
            f"checkpoint {path} cannot be read (truncated or not an HDF5 file): {error}"
        ) from error
    if recorded is not None:
        if isinstance(recorded, bytes):
            recorded = recorded.decode("ascii", "replace")
        if str(recorded) != digest:
            raise CorruptCheckpointError(
                f"checkpoint {path} is corrupt: its contents no longer match the "
                "SHA-256 digest recorded when it was written"
            )
    if non_finite:
        raise CorruptCheckpointError(
            f"checkpoint {path} holds NaN or infinite values (in {', '.join(non_finite[:3])}): "
            "it was saved after training diverged"
        )
    return recorded is not None


def load_checkpoint(model, path):
    """Loads `path` into `model`, strictly: every variable, optimizer included.

    Raises `CorruptCheckpointError` when the file is damaged (try an older
    one), `ValueError` when an intact file does not fit the model (an older
    one will not fit either).
    """
    sealed = verify_checkpoint(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model.load_weights(path)
            _restore_seed_states(model, path)
            problem = None
        except Exception as error:  # Keras raises ValueError, KeyError, OSError
            problem = error
    # Keras only warns when it skips the optimizer's variables; resuming with
    # a fresh optimizer state is not resuming, so that is an error here.
    skipped = [w for w in caught if "Skipping variable loading" in str(w.message)]
    for warning in caught:
        if warning not in skipped:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    if problem is None and skipped:
        problem = skipped[0].message
    if problem is None:
        return
    if sealed:
        raise ValueError(
            f"checkpoint {path} is intact but does not fit the model (different "
            f"architecture or optimizer settings): {problem}"
        ) from problem
    raise CorruptCheckpointError(
        f"checkpoint {path} cannot be loaded (damaged, or written for another model): {problem}"
    ) from problem


def list_checkpoints(directory):
    """`[(step, path), ...]` of `ckpt-<step>.weights.h5` files, oldest first."""
    found = []
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        match = _PATTERN.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found)


def read_pointer(pointer):
    """`(step, file name)` from a `latest.json`; ValueError if it is malformed."""
    try:
        with open(pointer) as handle:
            state = json.load(handle)
        name, step = state["path"], state["step"]
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{type(error).__name__}: {error}") from None
    match = _PATTERN.match(name) if isinstance(name, str) else None
    if not match or isinstance(step, bool) or not isinstance(step, int) or int(match.group(1)) != step:
        raise ValueError(f"it names {name!r} at step {step!r}, not a checkpoint of that step")
    return step, name


def checkpoint_candidates(directory, warn=False):
    """Checkpoints to resume from, newest first: the one `latest.json` names,
    then older files. A file newer than that is an unrecorded one (a crash
    before latest.json was updated) and is not a candidate. Without a usable
    latest.json, every file, newest first."""
    directory = str(directory)
    files = list_checkpoints(directory)
    pointer = os.path.join(directory, LATEST_POINTER)
    problem = None
    if not os.path.exists(pointer):
        if not files:
            return []
        problem = f"{directory} holds checkpoints but no {LATEST_POINTER}"
    else:
        try:
            step, name = read_pointer(pointer)
        except ValueError as error:
            problem = f"{pointer} is unreadable ({error})"
    if problem is not None:
        if warn:
            warnings.warn(f"{problem}; using the newest intact checkpoint file instead.", stacklevel=3)
        return files[::-1]
    path = os.path.join(directory, name)
    older = [(s, p) for s, p in files if s < step]
    if not os.path.exists(path):
        if warn:
            warnings.warn(
                f"{pointer} names {name}, which does not exist; trying older checkpoints.",
                stacklevel=3,
            )
        return older[::-1]
    return [(step, path)] + older[::-1]


def latest_checkpoint(directory):
    """`(step, path)` of the newest checkpoint in `directory`, or None.

    That is the one `latest.json` names (or, if it names a missing file, the
    next older one); without a usable `latest.json`, the newest
    `ckpt-<step>.weights.h5`. The file is not verified (`StepCheckpoint.restore`
    does that).
    """
    candidates = checkpoint_candidates(directory)
    return candidates[0] if candidates else None
