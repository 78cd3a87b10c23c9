"""`tf.distribute.MirroredStrategy` helpers (TensorFlow backend only).

Import this module only with `KERAS_BACKEND=tensorflow`: Keras 3 trains under
`tf.distribute` strategies on the TensorFlow backend only (JAX has
`keras.distribution`). Keras turns XLA compilation off under a strategy.

With `LabelSmoothedCrossEntropy`, the loss is normalised by the number of
target tokens of the global batch, so a run on N replicas follows a run on one
device over the same global batches (up to float summation order).
"""

import keras

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        "keras_transformer.training.distribute needs KERAS_BACKEND=tensorflow "
        f"(current backend: {keras.backend.backend()!r})."
    )

import tensorflow as tf  # noqa: E402


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
        return tf.distribute.MirroredStrategy(names)
    count = 1 if num_replicas is None else num_replicas
    devices = split_cpu(count)
    return tf.distribute.MirroredStrategy(devices[:count])
