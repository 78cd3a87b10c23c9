"""Periodic checkpoints, exact resumption after a crash, checkpoint averaging.

`keras.callbacks.BackupAndRestore(save_freq=N)` saves every N batches but,
after a restart, replays the interrupted epoch from its first batch on top of
the restored weights, so a resumed run sees some batches twice. Here training
is counted in batches ("steps") and the data pipeline is asked for the data of
a given step, so a resumed run continues exactly where the checkpoint left
off: `fit_resumable` reproduces an uninterrupted run (weights, optimizer
state, learning-rate schedule and the dropout seed-generator states).

A checkpoint is a Keras `.weights.h5` file (model weights, optimizer state)
named `ckpt-<step>.weights.h5`; `latest.json` names the newest complete one.
Keras does not save the states of the layers' seed generators (dropout) in a
weights file, so `StepCheckpoint` adds them to the same file, under
`keras_transformer/seed_generator_states`, and restores them: a resumed run
draws the same dropout masks as an uninterrupted one.
Files are written under a temporary name and renamed, so a crash while saving
leaves the previous checkpoint intact.

Faults: each file records a SHA-256 digest of its contents, so `restore`
notices a truncated, unreadable or altered checkpoint (or one holding NaN or
infinite values), warns naming the file and the reason, sets it aside as
`<name>.corrupt` and resumes from the newest intact one (keep at least two).
A missing or unreadable `latest.json` falls back to the newest intact file.
`StepCheckpoint` never writes non-finite weights: after a NaN or infinite
loss it stops saving, and `TerminateOnNonFiniteLoss` stops training there,
so the newest checkpoint is the last one from before the loss diverged.
"""

import contextlib
import glob
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import warnings
import zipfile

import h5py
import keras
import numpy as np

_LATEST = "latest.json"
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


def _atomic_write_json(path, payload):
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


def _append_seed_states(model, path):
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


def _write_digest(path):
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


def _load_checkpoint(model, path):
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


def _loss_value(logs):
    loss = (logs or {}).get("loss")
    return None if loss is None else float(keras.ops.convert_to_numpy(loss))


def _strategy_scope(model):
    """The scope of the tf.distribute strategy `model` was built under (a
    no-op elsewhere): variables created later, such as the optimizer's on
    restore, must belong to the same strategy."""
    strategy = getattr(model, "distribute_strategy", None)  # TensorFlow backend only
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


def _ensure_optimizer_built(model):
    # Loading a weights file that holds optimizer variables needs them to exist.
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        with _strategy_scope(model):
            optimizer.build(model.trainable_variables)


class StepCheckpoint(keras.callbacks.Callback):
    """Saves weights + optimizer state every `save_every_steps` training steps.

    A step is one training batch (one `train_step`, also with gradient
    accumulation). The count continues from `initial_step` (or from the
    checkpoint that `restore` loaded).

    No checkpoint is written from non-finite weights: when a save is due and
    the loss (Keras' running mean over the epoch, so any step of it counts) or
    any weight is NaN or infinite, saving stops for the rest of the fit, so the
    newest checkpoint is the last one from before the loss diverged. Pair it
    with `TerminateOnNonFiniteLoss` to stop training at that step.

    Args:
        directory: where to write `ckpt-<step>.weights.h5` and `latest.json`.
        save_every_steps: save after every this many steps (int >= 1).
        keep_last: keep only the newest this many checkpoints (None: all).
            Keep 5 (base) or 20 (big) to average them with
            `average_checkpoints` as the paper does; keep at least 2 so a
            damaged newest checkpoint leaves one to resume from.
        save_at_end: also save when training ends on an unsaved step.
        initial_step: steps already done before this callback's first fit.
    """

    def __init__(
        self,
        directory,
        save_every_steps,
        keep_last=None,
        save_at_end=True,
        initial_step=0,
    ):
        super().__init__()
        if not directory:
            raise ValueError("StepCheckpoint: `directory` must be a non-empty path.")
        if isinstance(save_every_steps, bool) or not isinstance(save_every_steps, int) or save_every_steps < 1:
            raise ValueError(
                "StepCheckpoint: `save_every_steps` must be an integer >= 1, "
                f"got {save_every_steps!r}."
            )
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
            raise ValueError(
                f"StepCheckpoint: `keep_last` must be None or >= 1, got {keep_last!r}."
            )
        self.directory = str(directory)
        self.save_every_steps = save_every_steps
        self.keep_last = keep_last
        self.save_at_end = save_at_end
        self.step = int(initial_step)
        self._epoch_start_step = self.step
        self._last_saved_step = None
        # Step of the first save refused in this fit (loss or weights not finite).
        self.diverged_step = None
        self._warned_divergence = False
        self._batch_logs = None

    # -- state on disk -----------------------------------------------------
    def checkpoint_path(self, step):
        return os.path.join(self.directory, f"ckpt-{step:09d}.weights.h5")

    def latest(self):
        """`(step, path)` of the newest checkpoint (not verified), or None."""
        return latest_checkpoint(self.directory)

    def restore(self, model):
        """Loads the newest intact checkpoint into `model`; returns its step
        (`initial_step` when there is none).

        `model` must be built and compiled (the optimizer state is loaded too).
        A damaged checkpoint (see `verify_checkpoint`) is reported with a
        warning, renamed `<name>.corrupt` and the next older one is tried;
        `CorruptCheckpointError` if none is intact. An intact checkpoint that
        does not fit the model raises `ValueError` (an older one would not fit
        either).
        """
        candidates = _checkpoint_candidates(self.directory, warn=True)
        if not candidates:
            return self.step
        if not model.built:
            raise ValueError(
                "StepCheckpoint.restore: the model must be built (call it on a "
                "batch) before its weights can be restored."
            )
        _ensure_optimizer_built(model)
        damaged = []
        for step, path in candidates:
            try:
                _load_checkpoint(model, path)
            except CorruptCheckpointError as error:
                damaged.append((path, error))
                continue
            break
        else:
            raise CorruptCheckpointError(
                f"StepCheckpoint.restore: no intact checkpoint in {self.directory}: "
                + "; ".join(str(error) for _, error in damaged)
                + ". Delete the directory to start over."
            )
        for bad_path, error in damaged:
            aside = bad_path + ".corrupt"
            os.replace(bad_path, aside)
            warnings.warn(
                f"{error}. Moved it to {aside}; resuming from {path} (step {step}).",
                stacklevel=2,
            )
        pointer = os.path.join(self.directory, _LATEST)
        try:
            recorded = _read_pointer(pointer) if os.path.exists(pointer) else None
        except ValueError:
            recorded = None
        if recorded != (step, os.path.basename(path)):
            _atomic_write_json(pointer, {"step": step, "path": os.path.basename(path)})
        self.step = self._epoch_start_step = self._last_saved_step = step
        self.diverged_step = None
        # A crash between writing a checkpoint and updating latest.json leaves
        # a newer, unlisted file (and maybe a temporary one): the resumed run
        # rewrites those steps, so drop them.
        for newer_step, newer_path in list_checkpoints(self.directory):
            if newer_step > step:
                os.remove(newer_path)
        for name in os.listdir(self.directory):
            if name.startswith(".tmp-"):
                os.remove(os.path.join(self.directory, name))
        return step

    def save(self, model=None):
        """Writes the checkpoint of the current step.

        Raises `NonFiniteWeightsError` (and writes nothing) if the model holds
        NaN or infinite values.
        """
        model = model or self.model
        os.makedirs(self.directory, exist_ok=True)
        final_path = self.checkpoint_path(self.step)
        temporary_path = os.path.join(
            self.directory, f".tmp-{os.getpid()}-{self.step}.weights.h5"
        )
        try:
            model.save_weights(temporary_path)
            _append_seed_states(model, temporary_path)
            _write_digest(temporary_path)
            with open(temporary_path, "rb+") as handle:
                os.fsync(handle.fileno())
        except NonFiniteWeightsError as error:
            os.remove(temporary_path)
            raise NonFiniteWeightsError(
                f"StepCheckpoint: not saving step {self.step} to {final_path}: {error}."
            ) from None
        except BaseException:
            if os.path.exists(temporary_path):
                os.remove(temporary_path)
            raise
        os.replace(temporary_path, final_path)
        _atomic_write_json(
            os.path.join(self.directory, _LATEST),
            {"step": self.step, "path": os.path.basename(final_path)},
        )
        self._last_saved_step = self.step
        self._prune()

    def _prune(self):
        if self.keep_last is None:
            return
        current = self.checkpoint_path(self.step)
        for _, path in list_checkpoints(self.directory)[: -self.keep_last]:
            if path != current:
                os.remove(path)

    def _save_unless_diverged(self, logs):
        """Saves, unless the loss or the weights are not finite; then warns
        and saves nothing more in this fit."""
        if self.diverged_step is None:
            # The epoch's running mean: not finite if any step of it was not.
            loss = _loss_value(logs)
            if loss is not None and not math.isfinite(loss):
                self.diverged_step = self.step
                reason = f"StepCheckpoint: not saving step {self.step}: the loss is {loss}"
            else:
                try:
                    self.save()
                    return
                except NonFiniteWeightsError as error:
                    self.diverged_step = self.step
                    reason = str(error)
        else:
            reason = (
                f"StepCheckpoint: not saving step {self.step}: the loss or the weights "
                f"were not finite at step {self.diverged_step}"
            )
        if not self._warned_divergence:
            self._warned_divergence = True
            newest = latest_checkpoint(self.directory)
            where = f"the newest checkpoint is {newest[1]}" if newest else "there is no checkpoint"
            warnings.warn(f"{reason}; no more checkpoints in this fit ({where}).", stacklevel=3)

    # -- callback hooks ----------------------------------------------------
    def on_train_begin(self, logs=None):
        self.diverged_step = None
        self._warned_divergence = False
        self._batch_logs = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start_step = self.step

    def step_after_batch(self, batch):
        """The global step reached once batch `batch` of the current epoch has run."""
        return self._epoch_start_step + batch + 1

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the index within the epoch of the last step run (it can
        # jump by steps_per_execution).
        previous = self.step
        self.step = self.step_after_batch(batch)
        self._batch_logs = logs  # read only when saving: no device sync per step
        if self.step // self.save_every_steps > previous // self.save_every_steps:
            self._save_unless_diverged(logs)

    def on_train_end(self, logs=None):
        if self.save_at_end and self._last_saved_step != self.step:
            self._save_unless_diverged(self._batch_logs)


class TerminateOnNonFiniteLoss(keras.callbacks.Callback):
    """Stops training at the first NaN or infinite loss and says where.

    After `fit` returns, `step` is the step whose loss was not finite (None if
    none was) and `loss` its value; a `RuntimeWarning` says the same when it
    happens. `StepCheckpoint` writes no checkpoint from that step on, so the
    newest checkpoint is from before it and restores finite weights.

    Args:
        checkpoint: the run's `StepCheckpoint`, to count steps as its file
            names do and name the newest checkpoint. `fit_resumable` sets it.
            Without one, steps are the optimizer's `iterations`.
    """

    def __init__(self, checkpoint=None):
        super().__init__()
        self.checkpoint = checkpoint
        self.step = None
        self.loss = None
        self.message = None

    def on_train_batch_end(self, batch, logs=None):
        loss = _loss_value(logs)
        if loss is None or math.isfinite(loss):
            return
        self.model.stop_training = True
        if self.step is not None:
            return
        self.loss = loss
        if self.checkpoint is not None:
            self.step = self.checkpoint.step_after_batch(batch)
            newest = latest_checkpoint(self.checkpoint.directory)
            before = (
                f"the newest checkpoint, {newest[1]}, is from step {newest[0]}"
                if newest else f"there is no checkpoint in {self.checkpoint.directory}"
            )
        else:
            self.step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            before = "no checkpoint was written from it"
        self.message = f"the loss became {self.loss} at step {self.step}; training stopped ({before})."
        warnings.warn(self.message, RuntimeWarning, stacklevel=2)


def list_checkpoints(directory):
    """`[(step, path), ...]` of `ckpt-<step>.weights.h5` files, oldest first."""
    found = []
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        match = _PATTERN.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found)


def _read_pointer(pointer):
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


def _checkpoint_candidates(directory, warn=False):
    """Checkpoints to resume from, newest first: the one `latest.json` names,
    then older files. A file newer than that is an unrecorded one (a crash
    before latest.json was updated) and is not a candidate. Without a usable
    latest.json, every file, newest first."""
    directory = str(directory)
    files = list_checkpoints(directory)
    pointer = os.path.join(directory, _LATEST)
    problem = None
    if not os.path.exists(pointer):
        if not files:
            return []
        problem = f"{directory} holds checkpoints but no {_LATEST}"
    else:
        try:
            step, name = _read_pointer(pointer)
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
    candidates = _checkpoint_candidates(directory)
    return candidates[0] if candidates else None


def _first_inputs(dataset):
    batch = next(iter(dataset.take(1) if hasattr(dataset, "take") else dataset))
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def fit_resumable(
    model,
    make_dataset,
    *,
    epochs,
    steps_per_epoch,
    checkpoint_dir,
    save_every_steps,
    keep_last=2,
    callbacks=None,
    **fit_kwargs,
):
    """`model.fit` that resumes exactly from the newest checkpoint after a crash.

    Run the same call again after an interruption (a kill inside an epoch,
    while saving or during validation): it loads the newest intact checkpoint
    in `checkpoint_dir` (weights, optimizer state and step; see
    `StepCheckpoint.restore`) and trains the remaining steps on the data those
    steps would have seen.

    Args:
        model: a compiled Keras model.
        make_dataset: `make_dataset(start_step)` -> the batches of global steps
            `start_step, start_step + 1, ...` (at least as many as remain),
            deterministically, e.g.
            `lambda s: batches.repeat().skip(s)` for a fixed-order or
            fixed-seed `tf.data` pipeline, or a generator started at `s`.
        epochs, steps_per_epoch: training length (`epochs * steps_per_epoch`
            steps); an epoch is a logging/callback period here.
        checkpoint_dir: directory for `StepCheckpoint`.
        save_every_steps: checkpoint period in steps.
        keep_last: checkpoints kept (>= 5 to average the last 5; >= 2 so a
            damaged newest checkpoint leaves an older one to resume from).
        callbacks: more callbacks. When resuming mid-epoch, fit is called
            twice (the rest of that epoch, then the following epochs), so they
            see `on_train_begin/end` twice; the second call is skipped if a
            callback stopped training in the first. A
            `TerminateOnNonFiniteLoss` among them is given this run's
            `StepCheckpoint` (steps counted as checkpoint names count them).
        **fit_kwargs: passed to `model.fit` (not `x`, `epochs`,
            `steps_per_epoch`, `initial_epoch`).

    Returns:
        A dict of per-epoch logs, like `History.history`, for the epochs run
        by this call.
    """
    for reserved in ("x", "y", "epochs", "steps_per_epoch", "initial_epoch"):
        if reserved in fit_kwargs:
            raise TypeError(f"fit_resumable: `{reserved}` is set by fit_resumable.")
    checkpoint = StepCheckpoint(
        checkpoint_dir, save_every_steps, keep_last=keep_last
    )
    for callback in callbacks or []:
        if isinstance(callback, TerminateOnNonFiniteLoss) and callback.checkpoint is None:
            callback.checkpoint = checkpoint
    if checkpoint.latest() is not None and not model.built:
        with _strategy_scope(model):
            model(_first_inputs(make_dataset(0)), training=False)
    start_step = checkpoint.restore(model)
    total_steps = epochs * steps_per_epoch
    history = {}

    def run(dataset, initial_epoch, last_epoch, steps):
        result = model.fit(
            dataset,
            initial_epoch=initial_epoch,
            epochs=last_epoch,
            steps_per_epoch=steps,
            callbacks=[checkpoint] + list(callbacks or []),
            **fit_kwargs,
        )
        for key, values in result.history.items():
            history.setdefault(key, []).extend(values)

    epoch, done_in_epoch = divmod(start_step, steps_per_epoch)
    if start_step < total_steps and done_in_epoch:
        # Finish the interrupted epoch with its remaining steps only.
        # No checkpoint at the end of this fit unless training ends here: an
        # uninterrupted run writes none at this step, and an extra one would
        # change which checkpoints are kept and averaged.
        checkpoint.save_at_end = False
        run(make_dataset(start_step), epoch, epoch + 1, steps_per_epoch - done_in_epoch)
        checkpoint.save_at_end = True
        epoch += 1
        if model.stop_training or epoch >= epochs:
            # A callback stopped training (do not start another fit), or it is done.
            checkpoint.on_train_end()
            return history
    if epoch < epochs:
        run(make_dataset(epoch * steps_per_epoch), epoch, epochs, steps_per_epoch)
    return history


# -- checkpoint averaging ---------------------------------------------------
def _resolve_checkpoints(checkpoints, last_n):
    if isinstance(checkpoints, (str, os.PathLike)) and os.path.isdir(checkpoints):
        directory = str(checkpoints)
        paths = [path for _, path in list_checkpoints(directory)]
        if not paths:  # other naming: order by the last number in the name
            candidates = glob.glob(os.path.join(directory, "*.weights.h5")) + glob.glob(
                os.path.join(directory, "*.keras")
            )

            def order(path):
                numbers = re.findall(r"\d+", os.path.basename(path))
                return (int(numbers[-1]) if numbers else -1, os.path.getmtime(path))

            paths = sorted(candidates, key=order)
        if not paths:
            raise FileNotFoundError(
                f"average_checkpoints: no *.weights.h5 or *.keras files in {directory}."
            )
    elif isinstance(checkpoints, (str, os.PathLike)):
        raise FileNotFoundError(f"average_checkpoints: {checkpoints} is not a directory.")
    else:
        paths = [str(path) for path in checkpoints]
        if not paths:
            raise ValueError("average_checkpoints: no checkpoint paths given.")
    if last_n is not None:
        if last_n < 1:
            raise ValueError(f"average_checkpoints: `last_n` must be >= 1, got {last_n}.")
        paths = paths[-last_n:]
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"average_checkpoints: {path} does not exist.")
        if not (path.endswith(".weights.h5") or path.endswith(".keras")):
            raise ValueError(
                f"average_checkpoints: {path} is neither a .weights.h5 nor a .keras file."
            )
    return paths


def _read_datasets(h5_file):
    arrays = {}

    def visit(name, item):
        if isinstance(item, h5py.Dataset):
            arrays[name] = item[()]

    h5_file.visititems(visit)
    return arrays


def _read_weights_file(path, scratch):
    if path.endswith(".weights.h5"):
        verify_checkpoint(path)  # a clear error naming a damaged file
    if path.endswith(".keras"):
        with zipfile.ZipFile(path) as archive:
            archive.extract("model.weights.h5", scratch)
        path = os.path.join(scratch, "model.weights.h5")
    with h5py.File(path, "r") as handle:
        return _read_datasets(handle)


def _is_averaged(name, array):
    # Model floating-point variables are averaged; optimizer state, integer
    # counters and seed states are taken from the newest checkpoint.
    return not name.startswith("optimizer/") and np.issubdtype(array.dtype, np.floating)


def average_checkpoints(checkpoints, last_n=5, output_path=None):
    """Element-wise mean of the model weights of the last `last_n` checkpoints.

    Args:
        checkpoints: a directory (its `ckpt-<step>.weights.h5` files, else its
            `*.weights.h5` / `*.keras` files ordered by the last number in
            their names) or a list of paths, oldest first.
        last_n: how many of the newest to average (None: all). The paper
            averages the last 5 (base, written every 10 minutes) or 20 (big).
        output_path: if given, a `.weights.h5` file to write: the newest
            checkpoint with its model weights replaced by the averages, ready
            for `model.load_weights(output_path)`.

    Returns:
        `{variable path in the weights file: np.ndarray}` for the averaged
        (floating-point model) variables. Averages are computed in float64 and
        cast back to each variable's dtype.
    """
    paths = _resolve_checkpoints(checkpoints, last_n)
    scratch = tempfile.mkdtemp(prefix="average-checkpoints-")
    try:
        sums = None
        for path in paths:
            arrays = _read_weights_file(path, scratch)
            arrays = {k: v for k, v in arrays.items() if _is_averaged(k, v)}
            if sums is None:
                sums = {k: v.astype(np.float64) for k, v in arrays.items()}
                dtypes = {k: v.dtype for k, v in arrays.items()}
                first = path
            elif arrays.keys() != sums.keys() or any(
                arrays[k].shape != sums[k].shape for k in sums
            ):
                raise ValueError(
                    f"average_checkpoints: {path} does not hold the same variables "
                    f"as {first}; only checkpoints of one model can be averaged."
                )
            else:
                for key, value in arrays.items():
                    sums[key] += value
        averages = {k: (v / len(paths)).astype(dtypes[k]) for k, v in sums.items()}
        if output_path is not None:
            output_path = str(output_path)
            if not output_path.endswith(".weights.h5"):
                raise ValueError(
                    "average_checkpoints: `output_path` must end in .weights.h5, "
                    f"got {output_path}."
                )
            newest = paths[-1]
            if newest.endswith(".keras"):
                with zipfile.ZipFile(newest) as archive:
                    archive.extract("model.weights.h5", scratch)
                newest = os.path.join(scratch, "model.weights.h5")
            temporary_path = output_path + ".tmp"
            shutil.copyfile(newest, temporary_path)
            with h5py.File(temporary_path, "r+") as handle:
                for key, value in averages.items():
                    handle[key][...] = value
            _write_digest(temporary_path)  # the copied file's digest is stale
            os.replace(temporary_path, output_path)
        return averages
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def save_averaged_model(model, checkpoints, output_path, last_n=5):
    """Loads the average of the last `last_n` checkpoints into `model` and
    saves it to `output_path` (`.keras`: whole model, `.weights.h5`: weights).

    `model` must be built like the model that wrote the checkpoints; its
    optimizer state (if any) is left as it is.
    """
    output_path = str(output_path)
    if not (output_path.endswith(".keras") or output_path.endswith(".weights.h5")):
        raise ValueError(
            f"save_averaged_model: `output_path` must end in .keras or .weights.h5, got {output_path}."
        )
    scratch = tempfile.mkdtemp(prefix="average-checkpoints-")
    try:
        averaged = os.path.join(scratch, "averaged.weights.h5")
        average_checkpoints(checkpoints, last_n=last_n, output_path=averaged)
        with h5py.File(averaged, "a") as handle:
            # The model weights are averaged; the newest checkpoint's optimizer
            # moments do not belong to them, so the model keeps its own.
            if "optimizer" in handle:
                del handle["optimizer"]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
            model.load_weights(averaged)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if output_path.endswith(".keras"):
        model.save(output_path)
    else:
        model.save_weights(output_path)
    return model
