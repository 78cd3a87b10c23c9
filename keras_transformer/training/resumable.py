"""Exact resumption after a crash: `StepCheckpoint`, `TerminateOnNonFiniteLoss`, `fit_resumable`.

`keras.callbacks.BackupAndRestore(save_freq=N)` saves every N batches but,
after a restart, replays the interrupted epoch from its first batch on top of
the restored weights, so a resumed run sees some batches twice. Here training
is counted in batches ("steps") and the data pipeline is asked for the data of
a given step, so a resumed run continues exactly where the checkpoint left
off: `fit_resumable` reproduces an uninterrupted run (weights, optimizer
state, learning-rate schedule and the dropout seed-generator states).

Faults: `restore` warns about a damaged checkpoint (see
`checkpoint_files.verify_checkpoint`), sets it aside as `<name>.corrupt` and
resumes from the newest intact one (keep at least two). `StepCheckpoint`
never writes non-finite weights: after a NaN or infinite loss it stops
saving, and `TerminateOnNonFiniteLoss` stops training there, so the newest
checkpoint is the last one from before the loss diverged.
"""

import contextlib
import logging
import math
import os
import warnings

import keras

from keras_transformer.training import checkpoint_files
from keras_transformer.training.checkpoint_files import LATEST_POINTER
from keras_transformer.training.checkpoint_files import CorruptCheckpointError
from keras_transformer.training.checkpoint_files import NonFiniteWeightsError
from keras_transformer.training.checkpoint_files import checkpoint_candidates
from keras_transformer.training.checkpoint_files import latest_checkpoint
from keras_transformer.training.checkpoint_files import list_checkpoints
from keras_transformer.training.checkpoint_files import load_checkpoint
from keras_transformer.training.checkpoint_files import read_pointer

log = logging.getLogger("keras_transformer")


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
        candidates = checkpoint_candidates(self.directory, warn=True)
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
                load_checkpoint(model, path)
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
        pointer = os.path.join(self.directory, LATEST_POINTER)
        try:
            recorded = read_pointer(pointer) if os.path.exists(pointer) else None
        except ValueError:
            recorded = None
        if recorded != (step, os.path.basename(path)):
            checkpoint_files.atomic_write_json(pointer, {"step": step, "path": os.path.basename(path)})
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
            checkpoint_files.append_seed_states(model, temporary_path)
            checkpoint_files.write_digest(temporary_path)
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
        checkpoint_files.atomic_write_json(
            os.path.join(self.directory, LATEST_POINTER),
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


class _StepCap(keras.callbacks.Callback):
    """Stops training once the run's `StepCheckpoint` has counted `max_steps`
    steps (the steps its file names count, also when the optimizer's
    iteration count started elsewhere, as in a fine-tuning run that kept
    another run's optimizer state)."""

    def __init__(self, checkpoint, max_steps):
        super().__init__()
        self.checkpoint = checkpoint
        self.max_steps = max_steps

    def on_train_batch_end(self, batch, logs=None):
        if self.checkpoint.step >= self.max_steps:
            self.model.stop_training = True


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


def _first_inputs(dataset):
    batch = next(iter(dataset.take(1) if hasattr(dataset, "take") else dataset))
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def _build_training_state(model, dataset):
    """Creates the optimizer's, compiled metrics' and loss's variables before
    `model.fit` on TensorFlow without a tf.distribute strategy.

    Keras 3.15's TensorFlow trainer builds them only then inside the first
    trace of the train step (its `_maybe_symbolic_build` returns at once
    without a strategy), and a `tf.function` whose first trace created
    variables is traced again: every training paid for tracing its whole
    train step (forward, backward, optimizer update) twice. Built here from
    the dataset's element spec (no batch is read), the train step is traced
    once. Other backends and strategies build them in `fit` already.
    """
    if keras.backend.backend() != "tensorflow" or getattr(model, "_distribute_strategy", None) is not None:
        return
    spec = getattr(dataset, "element_spec", None)
    build = getattr(model, "_symbolic_build", None)  # private: absent in another Keras, fit builds as before
    if spec is None or build is None or not model.built:  # e.g. a Python generator: built in the first trace
        return
    try:
        build(data_batch=spec)
    except Exception:  # a model Keras cannot build symbolically: fit builds in its first trace, as before
        log.debug("the training state is built in the first trace of the train step", exc_info=True)


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
    max_steps=None,
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
            `StepCheckpoint` (steps counted as checkpoint names count them),
            and so is any other callback with a `checkpoint` attribute set
            to None (`TrainingProgress`, `ValidationTranslation`).
        max_steps: optional cap on the steps, counted as checkpoint names
            count them: training stops at step `max_steps`, and a run
            resumed at or past it trains nothing.
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
        if getattr(callback, "checkpoint", False) is None:
            callback.checkpoint = checkpoint
    own_callbacks = [checkpoint] if max_steps is None else [checkpoint, _StepCap(checkpoint, max_steps)]
    if checkpoint.latest() is not None and not model.built:
        with _strategy_scope(model):
            model(_first_inputs(make_dataset(0)), training=False)
    start_step = checkpoint.restore(model)
    total_steps = epochs * steps_per_epoch
    history = {}
    if max_steps is not None and start_step >= max_steps:
        return history

    def run(dataset, initial_epoch, last_epoch, steps):
        _build_training_state(model, dataset)
        result = model.fit(
            dataset,
            initial_epoch=initial_epoch,
            epochs=last_epoch,
            steps_per_epoch=steps,
            callbacks=own_callbacks + list(callbacks or []),
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
