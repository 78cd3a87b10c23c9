"""Label-smoothed cross-entropy over target tokens, ignoring padding."""

import keras
from keras import ops

from keras_transformer.data.special_tokens import PAD_ID
from keras_transformer.training.tensorflow_kernels import sum_over_replicas

_REDUCTIONS = ("mean", "sum_over_batch_size", "sum", "none", None)


def _as_token_labels(y_true, y_pred, where):
    """Checks ranks and returns int32 labels (B, T) for logits (B, T, V)."""
    if len(y_pred.shape) != 3:
        raise ValueError(
            f"{where}: `y_pred` must be logits of shape (batch, length, "
            f"vocabulary), got shape {tuple(y_pred.shape)}."
        )
    if len(y_true.shape) == 3 and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, axis=-1)
    if len(y_true.shape) != 2:
        raise ValueError(
            f"{where}: `y_true` must be integer token ids of shape (batch, "
            f"length), got shape {tuple(y_true.shape)}."
        )
    return ops.cast(y_true, "int32")


def _token_weights(labels, pad_id, sample_weight):
    """float32 (B, T): 0 at padding, else the sample weight (default 1)."""
    weights = ops.cast(ops.not_equal(labels, pad_id), "float32")
    if sample_weight is not None:
        sample_weight = ops.cast(sample_weight, "float32")
        if len(sample_weight.shape) == 1:  # one weight per sequence
            sample_weight = ops.expand_dims(sample_weight, axis=-1)
        elif len(sample_weight.shape) == 3 and sample_weight.shape[-1] == 1:
            sample_weight = ops.squeeze(sample_weight, axis=-1)
        weights = weights * sample_weight
    return weights


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy from logits with label smoothing, ignoring pad labels.

    Smoothing convention (the one of `torch.nn.functional.cross_entropy(...,
    label_smoothing=eps)` and of `keras.losses.CategoricalCrossentropy`): the
    target distribution is `(1 - eps) * one_hot(y) + eps / V` over all `V`
    classes, the true class and the pad class included, so the per-token loss
    is `(1 - eps) * -log p(y) + eps * mean_k(-log p(k))`. Its minimum is the
    entropy of that distribution, not 0.

    Normalisation: the default reduction ("mean", alias "sum_over_batch_size")
    is the sum of the per-token losses divided by the number of non-pad
    target tokens (weighted by `sample_weight`, if given) of the *global*
    batch. Under `tf.distribute` a replica returns
    `local_sum / global_token_count`: the optimizer sums the replicas'
    gradients, which gives exactly the gradient of the global token mean, even
    when replicas hold different numbers of tokens (a per-replica mean, which
    Keras' built-in losses compute and then divide by the number of replicas,
    weights a replica's tokens by the inverse of its own token count instead).
    Keras multiplies the loss it *reports* by the number of replicas and
    averages over replicas weighted by their numbers of sequences, which again
    yields the global token mean when the replicas get equal numbers of
    sequences (a global batch divisible by the replica count); the gradients
    are exact in any case.

    Computation is float32 whatever the dtype policy (a stable softmax
    cross-entropy of the logits), so it is safe under `mixed_float16` / `mixed_bfloat16`.

    Args:
        label_smoothing: `eps` in [0, 1); 0.1 in the paper.
        pad_id: label id ignored by the loss (0).
        reduction: "mean"/"sum_over_batch_size" (global token mean), "sum"
            (sum over tokens) or "none"/None (per-token losses (B, T), 0 at
            padding).
        name: loss name.

    Call: `loss(y_true, y_pred, sample_weight=None)`, `y_true` int ids (B, T),
    `y_pred` logits (B, T, V); `sample_weight` (B,) or (B, T).
    """

    def __init__(
        self,
        label_smoothing=0.1,
        pad_id=PAD_ID,
        reduction="mean",
        name="label_smoothed_cross_entropy",
        dtype=None,
    ):
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"LabelSmoothedCrossEntropy: `reduction` must be one of "
                f"{_REDUCTIONS}, got {reduction!r}."
            )
        if not 0.0 <= float(label_smoothing) < 1.0:
            raise ValueError(
                "LabelSmoothedCrossEntropy: `label_smoothing` must be in "
                f"[0, 1), got {label_smoothing!r}."
            )
        # Computation is float32 regardless; `dtype` is accepted for
        # compatibility with `keras.losses.Loss` configs.
        super().__init__(name=name, reduction=reduction, dtype="float32")
        self.label_smoothing = float(label_smoothing)
        self.pad_id = int(pad_id)

    def call(self, y_true, y_pred):
        """Per-token losses (B, T) with 0 at padding positions."""
        logits = ops.cast(y_pred, "float32")
        labels = _as_token_labels(y_true, logits, "LabelSmoothedCrossEntropy")
        eps = self.label_smoothing
        vocabulary_size = ops.shape(logits)[-1]
        # The smoothed target distribution, written once, and the backend's
        # softmax cross-entropy: on TensorFlow one fused kernel computes the
        # loss and its gradient (softmax - target) together; a log_softmax
        # followed by a gather of the true class needs several passes over
        # the (B, T, V) logits forward and a scatter backward (twice the
        # time of the fused kernel on CPU for an 8k vocabulary).
        off = eps / ops.cast(vocabulary_size, "float32")
        is_label = ops.equal(
            ops.expand_dims(labels, -1), ops.arange(vocabulary_size, dtype="int32")
        )
        target = ops.where(is_label, 1.0 - eps + off, off)
        per_token = ops.categorical_crossentropy(target, logits, from_logits=True)
        not_pad = ops.cast(ops.not_equal(labels, self.pad_id), "float32")
        return per_token * not_pad

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Replaces keras.losses.Loss.__call__: its reductions divide by the
        # number of elements (pads included) and by the number of replicas.
        with keras.name_scope(self.name):
            y_pred = ops.convert_to_tensor(y_pred)
            y_true = ops.convert_to_tensor(y_true)
            per_token = self.call(y_true, y_pred)
            labels = _as_token_labels(y_true, y_pred, "LabelSmoothedCrossEntropy")
            weights = _token_weights(labels, self.pad_id, sample_weight)
            if sample_weight is not None:
                per_token = per_token * weights
            if self.reduction in ("none", None):
                return per_token
            total = ops.sum(per_token)
            if self.reduction == "sum":
                return total
            token_count, _ = sum_over_replicas(ops.sum(weights))
            return ops.divide_no_nan(total, token_count)

    def get_config(self):
        return {
            "label_smoothing": self.label_smoothing,
            "pad_id": self.pad_id,
            "reduction": self.reduction,
            "name": self.name,
        }
