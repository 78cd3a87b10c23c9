"""What a training child trained on: `record_trained_batches(write)` for the subprocess tests
(tests/tf/test_prepared_resume.py, tests/tf/test_cli_workers.py)."""

import numpy as np


def record_trained_batches(write):
    """Wraps the Transformer's train step so that `write(source, labels)` (NumPy arrays) runs on
    every batch it trains on, inside the compiled step: batches that were prefetched but never
    trained on are not seen. For training children that must report their batches."""
    import tensorflow as tf

    from keras_transformer.models.transformer import Transformer

    def call(source, labels):
        write(source.numpy(), labels.numpy())
        return np.int32(0)

    base_step = Transformer.train_step

    def recording_step(self, data):
        inputs, labels = data
        tf.py_function(call, [inputs["source"], labels], Tout=tf.int32)
        return base_step(self, data)

    Transformer.train_step = recording_step
