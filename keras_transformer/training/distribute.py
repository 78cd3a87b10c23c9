"""`tf.distribute` helpers: one host (MirroredStrategy), several hosts
(MultiWorkerMirroredStrategy). TensorFlow backend only.

Import this module only with `KERAS_BACKEND=tensorflow`: Keras 3 trains under
`tf.distribute` strategies on the TensorFlow backend only (JAX has
`keras.distribution`, see `keras_transformer.training.data_parallel`). Keras
turns XLA compilation off under a strategy.

With `LabelSmoothedCrossEntropy`, the loss is normalised by the number of
target tokens of the global batch, so a run on N replicas (on one host or on
several) follows a run on one device over the same global batches (up to
float summation order).
"""

import contextlib
import json
import os
import shutil
import tempfile

import keras

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        "keras_transformer.training.distribute needs KERAS_BACKEND=tensorflow "
        f"(current backend: {keras.backend.backend()!r})."
    )

import tensorflow as tf  # noqa: E402


class _KerasFitReduce:
    """A strategy `reduce` that accepts what Keras 3.15 `model.fit` passes it.

    Keras calls `strategy.reduce` in two places that fail under some
    strategies and batches:

    1. `TensorFlowTrainer._maybe_symbolic_build` reduces the first input
       batch, a nest such as `({"source": ..., "target": ...}, labels)`, in
       one call, only to read its shapes and dtypes. MultiWorkerMirroredStrategy
       takes no nest ("Attempt to convert a value ({'source': PerReplica...})
       with an unsupported type (<class 'dict'>) to a Tensor"), and both
       strategies fail when the batch does not split evenly over the replicas
       (MirroredStrategy: "Inputs to operation AddN ... must have the same
       size and shape"; several workers: "Shape mismatch in the collective
       instance"), which token-budget batches often do not (85 sentences of
       48 tokens over 2 GPUs).
    2. `reduce_per_replica` reduces the step's logs, which are scalars, with
       `strategy.reduce("MEAN", value, axis=0)` on several workers: "Invalid
       reduction dimension 0 for input with 0 dimensions"
       (https://github.com/keras-team/keras/issues/20585,
       https://github.com/tensorflow/tensorflow/issues/72388).

    Here a nest that the base class cannot reduce becomes, leaf by leaf, this
    worker's first replica's value (no communication, any shapes; Keras only
    reads the shapes), and a 0-d value is reduced with `axis=None`, across
    replicas only: the mean over replicas that the one-host path computes
    (`tf.reduce_mean(replica_values, axis=0)`). Every other call goes to the
    base class unchanged, so only calls that would raise behave differently,
    and once Keras is fixed this is inert (and can go).
    """

    _base_reduces_nests = True

    def reduce(self, reduce_op, value, axis):
        if tf.nest.is_nested(value):
            if self._base_reduces_nests and not _replica_shapes_differ(self, value):
                return super().reduce(reduce_op, value, axis)
            return tf.nest.map_structure(lambda item: self.experimental_local_results(item)[0], value)
        local = self.experimental_local_results(value)[0]
        if axis is not None and getattr(getattr(local, "shape", None), "rank", None) == 0:
            axis = None
        return super().reduce(reduce_op, value, axis=axis)


def _replica_shapes_differ(strategy, nest):
    for item in tf.nest.flatten(nest):
        shapes = {tuple(getattr(v, "shape", ())) for v in strategy.experimental_local_results(item)}
        if len(shapes) > 1:
            return True
    return False


class _KerasFitMirroredStrategy(_KerasFitReduce, tf.distribute.MirroredStrategy):
    """`tf.distribute.MirroredStrategy` with `_KerasFitReduce`."""


class _KerasFitMultiWorkerMirroredStrategy(_KerasFitReduce, tf.distribute.MultiWorkerMirroredStrategy):
    """`tf.distribute.MultiWorkerMirroredStrategy` with `_KerasFitReduce`."""

    _base_reduces_nests = False


def split_cpu(num_devices):
    """Splits the first physical CPU into `num_devices` logical devices.

    Must run before TensorFlow initialises its devices (before any op, any
    `tf.config.list_logical_devices` call, any Keras layer is built), so in
    practice at the top of a script or in a fresh process. Returns the logical
    device names ("/device:CPU:0", ...).
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int):
        raise TypeError(f"split_cpu: `num_devices` must be an int, got {num_devices!r}.")
    if num_devices < 1:
        raise ValueError(f"split_cpu: `num_devices` must be >= 1, got {num_devices}.")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices
        )
    except RuntimeError as error:
        existing = tf.config.get_logical_device_configuration(cpu) or [None]
        if len(existing) != num_devices:
            raise RuntimeError(
                "split_cpu: TensorFlow already initialised its devices; call "
                "split_cpu() before any TensorFlow op runs (e.g. first thing in "
                f"a fresh process). TensorFlow said: {error}"
            ) from error
    return [device.name for device in tf.config.list_logical_devices("CPU")]


def mirrored_strategy(num_replicas=None):
    """A `MirroredStrategy` over the GPUs, or over logical CPUs without GPUs.

    Its `reduce` lets Keras 3 `model.fit` start on a first batch that does
    not split evenly over the replicas (see `_KerasFitReduce`).

    Args:
        num_replicas: number of replicas. None: all GPUs, or 1 CPU. On a
            machine without GPUs the CPU is split into `num_replicas` logical
            devices (see `split_cpu`, same timing constraint).
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        names = [f"/gpu:{index}" for index in range(len(gpus))]
        if num_replicas is not None:
            if num_replicas > len(names):
                raise ValueError(
                    f"mirrored_strategy: asked for {num_replicas} replicas, "
                    f"only {len(names)} GPUs are visible."
                )
            names = names[:num_replicas]
        return _KerasFitMirroredStrategy(names)
    count = 1 if num_replicas is None else num_replicas
    devices = split_cpu(count)
    return _KerasFitMirroredStrategy(devices[:count])


# -- several hosts -----------------------------------------------------------
def _parse_tf_config():
    """The TF_CONFIG environment variable as a dict ({} when unset), checked."""
    text = os.environ.get("TF_CONFIG", "").strip()
    if not text:
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}): {text!r}") from None
    if not isinstance(config, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object, got {text!r}.")
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError(
            'TF_CONFIG needs a "cluster" object, e.g. {"worker": ["host1:12345", '
            f'"host2:12345"]}}; got {text!r}.'
        )
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ValueError(
            'TF_CONFIG needs a "task" object with "type" and "index", e.g. '
            f'{{"type": "worker", "index": 0}}; got {text!r}.'
        )
    members = cluster.get(task["type"])
    index = task["index"]
    if (
        not isinstance(members, list)
        or isinstance(index, bool)
        or not isinstance(index, int)
        or not 0 <= index < len(members)
    ):
        raise ValueError(
            f"TF_CONFIG: task {task['type']!r} index {task['index']!r} is not in "
            f"the cluster {cluster!r}."
        )
    return config


def multi_worker_strategy(communication="auto"):
    """A `MultiWorkerMirroredStrategy` for Keras 3 `model.fit`, from TF_CONFIG.

    Every host runs the same script with its own `TF_CONFIG`, e.g. on host 0
    of two:

        TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                    "task": {"type": "worker", "index": 0}}'

    (index 1 on host 1). Worker 0 is the chief (see `is_chief`). Each worker
    uses all its local GPUs (or its CPU) as replicas; the global batch is
    split over all the replicas of all the workers and gradients are summed
    over all of them. Without TF_CONFIG this is a one-worker strategy.

    Call it at the start of the program, before any other TensorFlow op
    (TensorFlow starts the worker's server here), build and compile the model
    under `strategy.scope()`, and call `model.fit` on every worker with the
    same data pipeline (see `shard_by_data`). `fit` blocks until all workers
    have joined.

    The returned strategy works around keras-team/keras#20585 ("Invalid
    reduction dimension 0 for input with 0 dimensions" in `model.fit`) and a
    failure before it (Keras reduces the first batch as one nest); see
    `_KerasFitReduce`. It is a `tf.distribute.MultiWorkerMirroredStrategy`
    subclass whose `reduce` handles those calls: nothing in Keras or
    TensorFlow is patched.

    Args:
        communication: "auto", "ring" (gRPC, what CPU tests use) or "nccl"
            (GPUs) for the all-reduce of gradients.
    """
    implementations = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }
    if communication not in implementations:
        raise ValueError(
            f"multi_worker_strategy: `communication` must be one of "
            f"{sorted(implementations)}, got {communication!r}."
        )
    _parse_tf_config()
    return _KerasFitMultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementations[communication]
        )
    )


def _task(strategy):
    """`(task type, task index, cluster job names)` of this process."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None and resolver.task_type is not None:
        jobs = set(resolver.cluster_spec().as_dict())
        return resolver.task_type, int(resolver.task_id or 0), jobs
    config = _parse_tf_config()
    if not config:
        return None, 0, set()
    return config["task"]["type"], int(config["task"]["index"]), set(config["cluster"])


def is_chief(strategy=None):
    """Whether this process is the chief, the worker whose files are kept.

    The chief is the "chief" task if TF_CONFIG has one, else worker 0, and
    any process without TF_CONFIG. `strategy`: a strategy from
    `multi_worker_strategy` (default: read TF_CONFIG).
    """
    task_type, index, jobs = _task(strategy)
    if task_type is None or task_type == "chief":
        return True
    return task_type == "worker" and index == 0 and "chief" not in jobs


def sum_over_workers(strategy, local_replicas, values):
    """`values` (floats) summed over the workers of `strategy`'s cluster, each
    worker counted once: an all-reduce, so every worker must call it, in step
    with the others. (float32: integers up to 2**24 are exact.)"""
    zeros = [0.0] * len(values)

    def part(context):
        # Every replica takes part; the first of each worker carries the worker's values.
        first = context.replica_id_in_sync_group % local_replicas == 0
        return tf.constant(values if first else zeros, tf.float32)

    per_replica = strategy.experimental_distribute_values_from_function(part)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    return [float(value) for value in total.numpy()]


def shard_by_data(dataset):
    """`dataset` with the DATA auto-shard policy, for several workers.

    Every worker runs the whole input pipeline and keeps its part of each
    global batch (the batch is split along its first axis over all the
    replicas, worker 0 taking the first part), so the pipeline must give the
    same batches in the same order on every worker: shuffle with a fixed seed
    (as `make_dataset(..., seed=...)` does). DATA rather than FILE: the
    project's pipelines start from in-memory pairs, not from files that could
    be dealt out to the workers; the default (AUTO) tries FILE, logs a warning
    and falls back to DATA anyway. For a pipeline that reads many files
    (at least one per worker), FILE sharding reads less.
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return dataset.with_options(options)


@contextlib.contextmanager
def worker_checkpoint_dir(directory, strategy=None):
    """The checkpoint directory for this worker: `directory` on the chief,
    a private temporary directory elsewhere (removed on exit).

    Every worker must save (saving may read variables that are reduced across
    workers, so a save on the chief alone can wait forever), but only the
    chief's files are kept, as TensorFlow's multi-worker guide does. To resume
    after a restart, every worker must load the same checkpoint: on a
    non-chief worker the temporary directory starts with the chief's
    checkpoints and `latest.json` (hard links where the file system allows,
    else copies), so `StepCheckpoint.restore` makes the same choice there as
    on the chief, and `directory` must be readable by all workers (a shared
    file system). Enter this before building the model: variable creation
    waits for every worker, so the chief cannot restore (or write) before the
    copy is complete.

        with worker_checkpoint_dir("runs/x/checkpoints", strategy) as path:
            with strategy.scope():
                model = ...
            fit_resumable(model, make_data, checkpoint_dir=path, ...)
    """
    from keras_transformer.training.checkpoint_files import LATEST_POINTER, list_checkpoints

    if is_chief(strategy):
        yield str(directory)
        return
    task_type, index, _ = _task(strategy)
    private = tempfile.mkdtemp(prefix=f"keras-transformer-{task_type}{index}-")
    try:
        # The pointer first: a checkpoint it names is then in the listing.
        pointer = os.path.join(str(directory), LATEST_POINTER)
        if os.path.exists(pointer):
            shutil.copy2(pointer, private)
        for _, path in list_checkpoints(str(directory)):
            target = os.path.join(private, os.path.basename(path))
            try:
                os.link(path, target)  # StepCheckpoint never rewrites a file in place
            except OSError:
                shutil.copy2(path, target)
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)
