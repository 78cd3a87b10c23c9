"""Token-level metrics that ignore padding."""

import keras
from keras import ops

from keras_transformer.data.special_tokens import PAD_ID
from keras_transformer.training.tensorflow_kernels import sum_over_replicas
from keras_transformer.training.losses import _as_token_labels, _token_weights


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of non-pad target tokens whose arg-max prediction is right.

    Accumulates (correct, counted) token totals over batches, so the result
    is a token-weighted accuracy over everything seen since the last reset.
    Under `tf.distribute`, Keras reports the *mean* of the replicas' results
    (read inside each replica); `result()` therefore sums the totals over the
    replicas first, so that every replica reports the global token-weighted
    accuracy even when replicas hold different numbers of tokens.

    Args:
        pad_id: label id that is not counted (0).
        name: metric name.
    """

    def __init__(self, pad_id=PAD_ID, name="masked_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype or "float32")
        self.pad_id = int(pad_id)
        self.correct = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="correct"
        )
        self.counted = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="counted"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.convert_to_tensor(y_pred)
        labels = _as_token_labels(
            ops.convert_to_tensor(y_true), y_pred, "MaskedAccuracy"
        )
        weights = _token_weights(labels, self.pad_id, sample_weight)
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        hits = ops.cast(ops.equal(predicted, labels), "float32") * weights
        self.correct.assign_add(ops.cast(ops.sum(hits), self.dtype))
        self.counted.assign_add(ops.cast(ops.sum(weights), self.dtype))

    def result(self):
        correct, _ = sum_over_replicas(ops.convert_to_tensor(self.correct))
        counted, _ = sum_over_replicas(ops.convert_to_tensor(self.counted))
        return ops.divide_no_nan(correct, counted)

    def reset_state(self):
        self.correct.assign(ops.zeros((), dtype=self.dtype))
        self.counted.assign(ops.zeros((), dtype=self.dtype))

    def get_config(self):
        return {"pad_id": self.pad_id, "name": self.name, "dtype": self.dtype}


@keras.saving.register_keras_serializable(package="keras_transformer")
class TargetTokenCount(keras.metrics.Metric):
    """Non-pad target tokens seen since the last reset (all replicas).

    What the progress reports divide by time for tokens/s: a per-step count
    needs no pass over the data outside the training step.
    """

    def __init__(self, pad_id=PAD_ID, name="target_tokens", dtype=None):
        super().__init__(name=name, dtype=dtype or "float32")
        self.pad_id = int(pad_id)
        self.counted = self.add_variable(shape=(), initializer="zeros", dtype=self.dtype, name="counted")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = _as_token_labels(ops.convert_to_tensor(y_true), ops.convert_to_tensor(y_pred), "TargetTokenCount")
        weights = _token_weights(labels, self.pad_id, sample_weight)
        self.counted.assign_add(ops.cast(ops.sum(weights), self.dtype))

    def result(self):
        counted, _ = sum_over_replicas(ops.convert_to_tensor(self.counted))
        return counted

    def reset_state(self):
        self.counted.assign(ops.zeros((), dtype=self.dtype))

    def get_config(self):
        return {"pad_id": self.pad_id, "name": self.name, "dtype": self.dtype}
