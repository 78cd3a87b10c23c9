"""Configure and train a run: `train(config)` trains (or resumes) the run in `config["output_dir"]`.

The run directory's layout is described in `keras_transformer.run`. Running
`train` again on the same `output_dir` resumes from the newest checkpoint;
fine-tuning starts from another run's model (`training.init_from`).
TensorFlow-specific (tf.data, tokenizer).
"""

import contextlib
import json
import math
import shutil
import signal
import time
from pathlib import Path

import keras
import numpy as np

from keras_transformer import config as config_lib
from keras_transformer.run.data import (
    CONFIG_FILE,
    MARIAN_TOKENIZER_DIR,
    MODEL_FILE,
    TOKENIZER_FILE,
    RunError,
    bucket_boundaries,
    prepare,
    prepared_dir,
    read_pairs,
)
from keras_transformer.run.trained import load_tokenizer
from keras_transformer.run.translate import translate_texts
from keras_transformer.training.progress import read_best


CHECKPOINT_DIR = "checkpoints"


class _TimeLimit(keras.callbacks.Callback):
    """Stops training after `minutes` of wall-clock time (checked every batch).

    On a cluster every worker has one, and the chief's decides for all (`SharedStop`)."""

    def __init__(self, minutes):
        super().__init__()
        self.deadline = time.monotonic() + 60 * minutes
        self.reached = False

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() > self.deadline:
            self.reached = True
            self.model.stop_training = True


def build_model(config, vocabulary_size):
    from keras_transformer.models.transformer import Transformer

    model_config = config["model"]
    return Transformer.from_preset(
        model_config["preset"], vocabulary_size=vocabulary_size, **config_lib.model_overrides(model_config)
    )


def run_boundaries(config, recorded_plan=None):
    """The bucket boundaries a run trains with: those of its recorded plan (`run.data.check_plan`)
    once it has checkpoints and `data.bucket_width` is unset, since the default depends on the
    hardware (`bucket_boundaries`) and a run resumed on other hardware must keep its batches;
    else those of `data.bucket_width` or the default."""
    if recorded_plan is not None and config["data"]["bucket_width"] is None:
        return [int(boundary) for boundary in recorded_plan["boundaries"]]
    from keras_transformer.data import default_bucket_boundaries

    return bucket_boundaries(config) or default_bucket_boundaries(config["data"]["max_length"])


def compile_model(model, config):
    from keras_transformer.training import LabelSmoothedCrossEntropy, MaskedAccuracy, paper_optimizer
    from keras_transformer.training.metrics import TargetTokenCount

    training = config["training"]
    model.compile(
        optimizer=paper_optimizer(
            model.d_model,
            warmup_steps=training["warmup_steps"],
            scale=training["learning_rate_scale"],
            gradient_accumulation_steps=training["gradient_accumulation_steps"],
        ),
        loss=LabelSmoothedCrossEntropy(training["label_smoothing"]),
        metrics=[MaskedAccuracy(), TargetTokenCount()],
    )
    return model


def train(config, verbose="auto", callbacks=()):
    """Trains (or resumes) the run described by `config`; returns the output directory.

    Progress goes through `training.progress.TrainingProgress` (a live line on
    a terminal, a line every `training.progress_every_steps` steps or
    `progress_every_seconds` seconds otherwise, records in progress.jsonl);
    `verbose` other than "auto" also turns on Keras' own progress output.
    `callbacks` are more Keras callbacks for `fit` (after the run's own).
    `training.mixed_precision` is the global dtype policy while the run
    trains; the caller's is put back after, so that whatever the process
    builds next (an import, another run) is built as it would have been.
    """
    caller_policy = keras.config.dtype_policy()
    try:
        return _train(config, verbose, callbacks)
    finally:
        keras.config.set_dtype_policy(caller_policy)


def _train(config, verbose, callbacks):
    from keras_transformer.run.workers import (
        chief_failure,
        clear_chief_failure,
        join_cluster,
        record_chief_failure,
        run_directory,
        wait_for,
    )
    from keras_transformer.training import list_checkpoints

    started = time.time()
    worker = join_cluster()  # first: on a cluster (TF_CONFIG), this starts the worker's server
    chief = worker is None or worker.chief
    output_dir = Path(config["output_dir"])
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"output_dir {output_dir}: cannot create it: {error}") from None
    training = config["training"]
    if training["mixed_precision"]:
        keras.config.set_dtype_policy(training["mixed_precision"])
    keras.utils.set_random_seed(training["seed"])
    if chief:
        (output_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2))

    init_model_path = init_optimizer_path = None
    if training["init_from"]:
        init_model_path, init_tokenizer_path = _init_source(training["init_from"])
        if training["init_optimizer"] == "keep":
            init_optimizer_path = _init_optimizer_source(training["init_from"])
        if chief:
            _adopt_tokenizer(init_tokenizer_path, output_dir / init_tokenizer_path.name)
    if chief:
        clear_chief_failure(output_dir)
        # A run that has trained on its data keeps that data: a changed input is an error, not a new corpus.
        has_checkpoints = bool(list_checkpoints(str(output_dir / CHECKPOINT_DIR)))
        try:
            prepared = prepare(config, on_change="error" if has_checkpoints else "rebuild")
        except Exception as error:
            if worker is not None:
                record_chief_failure(output_dir, error)
            raise
    else:
        try:
            prepared = wait_for(lambda: prepare(config, build=False), f"the chief to prepare {prepared_dir(config)}",
                                timeout_s=60 * training["worker_wait_minutes"],
                                failed=lambda: chief_failure(output_dir, started))
        except RuntimeError as error:
            raise RunError(str(error)) from None
    with run_directory(worker, output_dir) as run_dir:
        # A worker other than the chief writes its copy of the run privately.
        config = config_lib.merge(config, {"output_dir": str(run_dir),
                                           "data": {"prepared_dir": str(prepared.directory)}}, origin="train")
        _train_prepared(config, prepared, worker, init_model_path, init_optimizer_path, verbose, callbacks)
    return output_dir


def _train_prepared(config, prepared, worker, init_model_path, init_optimizer_path, verbose, callbacks):
    """`train` from its prepared data on: model, fit, final model."""
    from keras_transformer.data import SubwordTokenizer, make_dataset
    from keras_transformer.run.data import check_plan, read_plan, training_batches
    from keras_transformer.training import TerminateOnNonFiniteLoss, fit_resumable, list_checkpoints, save_averaged_model
    from keras_transformer.training.progress import ValidationTranslation
    from keras_transformer.training.shared_stop import SharedStop

    output_dir, training = Path(config["output_dir"]), config["training"]
    tokenizer_path = output_dir / TOKENIZER_FILE
    if (output_dir / MARIAN_TOKENIZER_DIR).is_dir() and not tokenizer_path.is_file():
        tokenizer = load_tokenizer(output_dir)  # an imported run's, adopted by training.init_from
    else:
        if not tokenizer_path.is_file():
            tokenizer_path.write_bytes(Path(prepared.tokenizer_path).read_bytes())
        tokenizer = SubwordTokenizer.load(str(tokenizer_path))
    checkpoint_dir = output_dir / CHECKPOINT_DIR
    has_checkpoints = bool(list_checkpoints(str(checkpoint_dir)))
    boundaries = run_boundaries(config, read_plan(checkpoint_dir) if has_checkpoints else None)
    steps_per_epoch, dataset_from, plan_record = training_batches(config, prepared, boundaries, worker)
    check_plan(checkpoint_dir, plan_record, has_checkpoints)

    def dataset_options(training_split):
        return dict(
            tokens_per_batch=training["tokens_per_batch"],
            max_length=config["data"]["max_length"],
            bucket_boundaries=boundaries,
            training=training_split,
            seed=training["seed"],
        )

    validation = validation_pairs = None
    if config["data"]["valid"]:
        validation_pairs = read_pairs(config, "valid")
        validation = make_dataset(validation_pairs, tokenizer, **dataset_options(False))

    strategy = None
    if worker is not None:
        strategy = worker.strategy
        print(f"MultiWorkerMirroredStrategy: worker {worker.index} of {worker.count}"
              f"{' (chief)' if worker.chief else ''}, {strategy.num_replicas_in_sync} replicas in all", flush=True)
    elif training["distribute"]:
        from keras_transformer.training.distribute import mirrored_strategy

        strategy = mirrored_strategy()
        print(f"MirroredStrategy over {strategy.num_replicas_in_sync} replicas", flush=True)
    scope = strategy.scope() if strategy else contextlib.nullcontext()
    with scope:
        model = compile_model(build_model(config, tokenizer.vocabulary_size), config)
        if worker is not None:
            # Built here: a distributed dataset cannot give fit_resumable a first batch to build it on.
            model({"source": np.ones((1, 2), "int32"), "target": np.ones((1, 2), "int32")}, training=False)
        if init_model_path is not None:
            if list_checkpoints(str(output_dir / CHECKPOINT_DIR)):
                print(f"init_from: {output_dir} has checkpoints; resuming them instead", flush=True)
            else:
                _load_initial_weights(model, init_model_path, init_optimizer_path)

    epochs = training["epochs"]
    nan_guard = TerminateOnNonFiniteLoss()
    time_limit = None
    if training["max_minutes"]:
        time_limit = _TimeLimit(training["max_minutes"])
    # Progress and validation write into the logs before TensorBoard reads them.
    extra_callbacks, callbacks = list(callbacks), [
        nan_guard, *_progress_callbacks(config, model, tokenizer, validation_pairs, steps_per_epoch, time_limit)]
    if worker is not None:
        from keras_transformer.training.worker_agreement import WorkerAgreement

        # First: no worker validates or trains before all are known to train the same run.
        plan = {key: value for key, value in plan_record.items() if key != "prepared_sha256"}
        callbacks.insert(0, WorkerAgreement(worker.strategy, worker.local_replicas, worker.chief, worker.index, {
            "prepared data": plan_record["prepared_sha256"], "batch plan": json.dumps(plan, sort_keys=True)}))
    callbacks.append(keras.callbacks.TensorBoard(str(output_dir / "tensorboard"),
                                                 update_freq=training["progress_every_steps"]))
    if time_limit is not None:
        callbacks.append(time_limit)
    if training["max_steps"]:  # fit_resumable stops there
        epochs = min(epochs, math.ceil(training["max_steps"] / steps_per_epoch))
    callbacks.extend(extra_callbacks)
    # Last: every worker of a cluster stops at the step the chief decides (or a signal asks for).
    shared_stop = SharedStop(None, chief=True) if worker is None else SharedStop(
        worker.strategy, worker.local_replicas, chief=worker.chief)
    callbacks.append(shared_stop)
    print(f"model: {model.count_params():,} parameters; {steps_per_epoch} steps per epoch, "
          f"{epochs} epochs", flush=True)
    validator = next((c for c in callbacks if isinstance(c, ValidationTranslation)), None)
    max_steps = training["max_steps"]
    if validator is not None and validator.stopped_early:
        print(f"early stop: the run in {output_dir} stopped early before (best.json); restoring its checkpoint, "
              "training no further", flush=True)
        max_steps = 0  # fit_resumable restores the newest checkpoint and trains nothing
    from keras_transformer.training.worker_agreement import WorkerMismatchError

    try:
        fit_resumable(
            model,
            dataset_from,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            checkpoint_dir=str(output_dir / CHECKPOINT_DIR),
            save_every_steps=training["save_every_steps"],
            keep_last=max(training["keep_checkpoints"], training["average_last"]),
            callbacks=callbacks,
            max_steps=max_steps,
            validation_data=validation,
            shuffle=False,  # the pipeline shuffles (Keras would only warn that it ignores this)
            verbose=0 if verbose == "auto" else verbose,  # TrainingProgress reports by default
        )
    except WorkerMismatchError as error:
        raise RunError(str(error)) from None
    if shared_stop.signal is not None:
        name = signal.Signals(shared_stop.signal).name
        raise RunError(f"training stopped by {name} at step {shared_stop.step}; its checkpoint is in "
                       f"{output_dir / CHECKPOINT_DIR}: run the same command again to resume.")
    if time_limit is not None and time_limit.reached and (worker is None or worker.chief):
        print(f"time limit: training.max_minutes {training['max_minutes']} reached", flush=True)
    if nan_guard.step is not None:
        raise RunError(f"training stopped: the loss became {nan_guard.loss} at step {nan_guard.step}; "
                       f"checkpoints before it are in {output_dir / CHECKPOINT_DIR}.")
    if validator is not None:
        # A run resumed at its last step trains nothing (no callback runs);
        # the validation a kill cut short there is still due.
        validator.set_model(model)
        validator.validate_if_due()

    checkpoints = list_checkpoints(str(output_dir / CHECKPOINT_DIR))
    last_n = min(training["average_last"], len(checkpoints))
    model_path = output_dir / MODEL_FILE
    best = read_best(output_dir)
    final = training["final_model"]
    if final == "auto":
        final = "best" if training["validate_every_steps"] else "average"
    if final == "best" and best is None:
        print("model: no validated best model (set training.validate_every_steps); using the average", flush=True)
    elif final == "best":
        model.load_weights(best["weights"])
        model.save(str(model_path))
        print(f"model: the best validated weights (step {best['step']}, {best['metric']} {best['value']:.2f}) "
              f"-> {model_path}", flush=True)
        return output_dir
    if last_n > 1:
        save_averaged_model(model, str(output_dir / CHECKPOINT_DIR), str(model_path), last_n=last_n)
        print(f"model: average of the last {last_n} checkpoints -> {model_path}", flush=True)
    else:
        model.save(str(model_path))
        print(f"model: -> {model_path}", flush=True)
    return output_dir


def _init_source(init_from):
    """(model file, tokenizer) named by training.init_from: a run directory or
    a .keras file; the tokenizer is the run's tokenizer.model, or the
    marian_tokenizer/ folder of an imported run."""
    path = Path(init_from)
    if path.is_dir():
        model_path, run_dir = path / MODEL_FILE, path
    elif path.suffix == ".keras":
        model_path, run_dir = path, path.parent
    else:
        raise RunError(f"training.init_from {init_from}: not a run directory nor a .keras model file.")
    tokenizer_path = run_dir / TOKENIZER_FILE
    if not tokenizer_path.is_file() and (run_dir / MARIAN_TOKENIZER_DIR).is_dir():
        tokenizer_path = run_dir / MARIAN_TOKENIZER_DIR
    if not model_path.is_file():
        raise RunError(f"training.init_from {init_from}: no model at {model_path}.")
    if not tokenizer_path.exists():
        raise RunError(f"training.init_from {init_from}: no tokenizer at {tokenizer_path}.")
    return model_path, tokenizer_path


def _init_optimizer_source(init_from):
    """The checkpoint whose optimizer state `training.init_optimizer: keep`
    takes: the newest one of the run directory `init_from`."""
    from keras_transformer.training import latest_checkpoint

    path = Path(init_from)
    if not path.is_dir():
        raise RunError(f"training.init_optimizer keep: training.init_from {init_from} is a model file, which "
                       "holds no optimizer state; name the run directory it came from (its checkpoints/ hold "
                       "the state), or use training.init_optimizer reset.")
    newest = latest_checkpoint(str(path / CHECKPOINT_DIR))
    if newest is None:
        raise RunError(f"training.init_optimizer keep: {path / CHECKPOINT_DIR} holds no checkpoint "
                       "(ckpt-<step>.weights.h5) to take the optimizer state from; use training.init_optimizer "
                       "reset.")
    return Path(newest[1])


def _adopt_tokenizer(source, destination):
    """The fine-tuned run uses the initial model's tokenizer (a file, or an
    imported run's folder): copied in, or checked against the one the run
    already has."""
    def contents(path):
        if path.is_dir():
            return {item.name: item.read_bytes() for item in sorted(path.iterdir()) if item.is_file()}
        return path.read_bytes() if path.is_file() else None

    data = contents(source)
    # A run has one tokenizer: a tokenizer.model beside an adopted marian_tokenizer/ (or the reverse)
    # would be read instead of the initial model's.
    other = destination.with_name(TOKENIZER_FILE if destination.name == MARIAN_TOKENIZER_DIR else MARIAN_TOKENIZER_DIR)
    if other.exists():
        raise RunError(f"tokenizer mismatch: {other} is not the tokenizer of training.init_from ({source}); the "
                       "model's embeddings belong to the second. Use a new output_dir for the fine-tuned run.")
    if destination.exists():
        if contents(destination) != data:
            raise RunError(
                f"tokenizer mismatch: {destination} differs from {source} (training.init_from); the model's "
                "embeddings belong to the second. Use a new output_dir for the fine-tuned run."
            )
        return
    if isinstance(data, bytes):
        destination.write_bytes(data)
    else:
        # Written whole under another name first: a half-copied folder is never taken for the tokenizer.
        partial = destination.with_name(destination.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for name, file_data in data.items():
            (partial / name).write_bytes(file_data)
        partial.rename(destination)
    print(f"tokenizer: {source} (training.init_from) -> {destination}", flush=True)


# Settings that must agree between the initial model and the fine-tuned one.
_INIT_KEYS = ("vocabulary_size", "source_vocabulary_size", "d_model", "num_heads", "d_ff", "num_encoder_layers",
              "num_decoder_layers", "norm_first", "positional_encoding", "max_length", "activation",
              "layer_norm_epsilon", "output_bias", "sinusoid_layout")


def _load_initial_weights(model, model_path, optimizer_checkpoint=None):
    """The weights of `model_path` and, with `optimizer_checkpoint`, the
    optimizer state (moments and iteration count) of that checkpoint."""
    initial = keras.saving.load_model(str(model_path), compile=False)
    mine, theirs = model.get_config(), initial.get_config()
    different = [f"{key} {mine.get(key)!r} here, {theirs.get(key)!r} in {model_path}"
                 for key in _INIT_KEYS if mine.get(key) != theirs.get(key)]
    if different:
        raise RunError("training.init_from: the model configuration differs from the initial model's: "
                       + "; ".join(different) + ". Set the same model.* keys (or drop them).")
    if optimizer_checkpoint is not None:
        _load_initial_optimizer(model, optimizer_checkpoint)
    model.set_weights(initial.get_weights())
    if optimizer_checkpoint is None:
        print(f"model: initial weights from {model_path} (training.init_from); optimizer and schedule start "
              "afresh (training.init_optimizer reset)", flush=True)
        return
    iterations = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    print(f"model: initial weights from {model_path} (training.init_from), optimizer state from "
          f"{optimizer_checkpoint} (training.init_optimizer keep): the learning-rate schedule continues at "
          f"iteration {iterations}; steps, checkpoints and training.max_steps count this run's steps from 0",
          flush=True)


def _load_initial_optimizer(model, checkpoint):
    """Loads the optimizer state of `checkpoint` into `model` (its weights
    and dropout seed states come along and are overwritten or put back)."""
    from keras_transformer.training.checkpoint_files import load_checkpoint
    from keras_transformer.training.resumable import _ensure_optimizer_built

    seeds = [(v, keras.ops.convert_to_numpy(v)) for v in model.variables if v.name == "seed_generator_state"]
    _ensure_optimizer_built(model)
    try:
        load_checkpoint(model, str(checkpoint))
    except ValueError as error:  # CorruptCheckpointError too
        raise RunError(f"training.init_optimizer keep: the optimizer state in {checkpoint} does not fit this "
                       "run's optimizer (training.gradient_accumulation_steps and training.mixed_precision must "
                       f"match the source run's), or the file is damaged: {error}") from None
    for variable, value in seeds:
        variable.assign(value)


def _progress_callbacks(config, model, tokenizer, validation_pairs, steps_per_epoch, time_limit):
    """TrainingProgress, and ValidationTranslation when training.validate_every_steps is set."""
    from keras_transformer.training.progress import TrainingProgress, ValidationTranslation

    training = config["training"]
    output_dir = Path(config["output_dir"])
    callbacks = [TrainingProgress(
        output_dir, every_steps=training["progress_every_steps"], every_seconds=training["progress_every_seconds"],
        deadline=None if time_limit is None else time_limit.deadline, steps_per_epoch=steps_per_epoch,
    )]
    if training["validate_every_steps"]:
        if not validation_pairs:
            raise RunError("training.validate_every_steps needs a validation corpus (set data.valid).")
        subset = validation_pairs[: training["validation_sentences"]]
        decoding = dict(config["decoding"], beam_size=training["validation_beam_size"])
        callbacks.append(ValidationTranslation(
            lambda texts: translate_texts(model, tokenizer, texts, decoding,
                                          max_source_length=config["data"]["max_length"]),
            [s for s, _ in subset], [t for _, t in subset], training["validate_every_steps"], output_dir,
            metric=training["early_stopping_metric"], patience=training["early_stopping_patience"],
            min_delta=training["early_stopping_min_delta"],
        ))
    return callbacks
