"""Data parallelism with `keras.distribution` (JAX backend).

Keras implements `keras.distribution` for JAX only; on TensorFlow use
`keras_transformer.training.distribute` (MirroredStrategy on one host,
MultiWorkerMirroredStrategy on several). With `DataParallel`, `model.fit`
traces one program over global arrays: every global batch is split along its
first axis over the devices and the variables are replicated. Our loss and
metrics then see the whole global batch, so the loss is the global token mean
with nothing to all-reduce by hand.
"""

import keras


def data_parallel(devices=None):
    """Sets and returns a `keras.distribution.DataParallel` over `devices`.

    Call it before building the model: variables created afterwards are
    replicated over the devices, and `model.fit` splits each batch over them.
    The batch size of every batch must be a multiple of the number of devices
    (JAX cannot split 7 rows over 2 devices).

    Args:
        devices: device names such as `["gpu:0", "gpu:1"]` or JAX devices
            (`jax.devices()`); None: all devices of the default platform
            (the GPUs, else the CPU devices; for several CPU devices in tests
            set `XLA_FLAGS=--xla_force_host_platform_device_count=N` before
            JAX is imported).
    """
    if keras.backend.backend() != "jax":
        raise RuntimeError(
            "data_parallel: keras.distribution runs on the JAX backend only "
            f"(KERAS_BACKEND={keras.backend.backend()!r}); on TensorFlow use "
            "keras_transformer.training.distribute.mirrored_strategy() or "
            "multi_worker_strategy()."
        )
    if devices is None:
        devices = keras.distribution.list_devices()
    devices = list(devices)
    if not devices:
        raise ValueError("data_parallel: `devices` is empty.")
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    return distribution
