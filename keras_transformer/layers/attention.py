"""Scaled dot-product attention and multi-head attention (paper section 3.2).

Masks are boolean and broadcastable to (batch, heads, query_length, key_length):
True means "this query may attend to this key". Padding and causal masks are
combined with a logical AND before they reach these layers (see `masks.py`).
"""

import math

import keras
from keras import ops

_REDUCED_PRECISION = ("float16", "bfloat16")


@keras.saving.register_keras_serializable(package="keras_transformer")
class ScaledDotProductAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(d_k)) V with an optional boolean mask.

    Inputs are (batch, heads, length, depth). Scores and softmax are computed in
    float32 even under mixed precision, and masked scores are *replaced* (not
    added to) with a large negative float32 value, so that a query row whose
    keys are all masked yields finite outputs (a uniform average) in float32,
    bfloat16 and float16 instead of NaN or an overflow.

    Args:
        dropout: dropout rate on the attention weights (not in the paper; 0 by
            default).
    """

    def __init__(self, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout = float(dropout)
        self._weights_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def call(self, query, key, value, attention_mask=None, training=None, return_attention_weights=False):
        depth = ops.shape(query)[-1]
        scale = 1.0 / math.sqrt(depth)
        scores = ops.matmul(query * ops.cast(scale, query.dtype), ops.swapaxes(key, -1, -2))
        if self.compute_dtype in _REDUCED_PRECISION:
            scores = ops.cast(scores, "float32")
        if attention_mask is not None:
            scores = ops.where(
                ops.cast(attention_mask, "bool"), scores, ops.cast(-1e9, scores.dtype)
            )
        weights = ops.softmax(scores, axis=-1)
        weights = ops.cast(weights, value.dtype)
        dropped = self._weights_dropout(weights, training=training)
        outputs = ops.matmul(dropped, value)
        if return_attention_weights:
            return outputs, weights
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update({"dropout": self.dropout})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with Q/K/V/O projections, d_v = d_model / h.

    d_k (the width of each head's queries and keys) is d_model / h unless
    `key_dim` sets it: the paper's Table 3 row (B) shrinks d_k alone, keeping
    h and d_v. `depth` is d_v and `key_depth` is d_k.

    `call(query, value, key=None, attention_mask=None)`. Incremental decoding
    (keys and values cached across steps) uses the projections and the
    `attention` sub-layer directly: see `keras_transformer.models.incremental`.
    """

    def __init__(self, d_model, num_heads, dropout=0.0, use_bias=True, key_dim=None, **kwargs):
        super().__init__(**kwargs)
        if d_model % num_heads:
            raise ValueError(
                f"`d_model` ({d_model}) must be divisible by `num_heads` ({num_heads})."
            )
        if key_dim is not None and int(key_dim) < 1:
            raise ValueError(f"`key_dim` must be a positive int or None, got {key_dim!r}.")
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.depth = self.d_model // self.num_heads
        self.key_dim = None if key_dim is None else int(key_dim)
        self.key_depth = self.depth if self.key_dim is None else self.key_dim
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)

        def projection(name, width=self.d_model):
            return keras.layers.Dense(
                width,
                use_bias=self.use_bias,
                kernel_initializer="glorot_uniform",
                dtype=self.dtype_policy,
                name=name,
            )

        self.query_projection = projection("query", self.num_heads * self.key_depth)
        self.key_projection = projection("key", self.num_heads * self.key_depth)
        self.value_projection = projection("value")
        self.output_projection = projection("output")
        self.attention = ScaledDotProductAttention(
            dropout=self.dropout, dtype=self.dtype_policy, name="attention"
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        self.query_projection.build(query_shape)
        self.key_projection.build(key_shape)
        self.value_projection.build(value_shape)
        self.output_projection.build(tuple(query_shape[:-1]) + (self.d_model,))
        self.built = True

    def split_heads(self, x, depth=None):
        """(batch, length, heads * depth) -> (batch, length, heads, depth); `depth`
        defaults to d_v (pass `key_depth` for queries and keys)."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads, depth or self.depth))

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        training=None,
        return_attention_weights=False,
    ):
        if key is None:
            key = value
        # (batch, length, heads, depth) -> (batch, heads, length, depth)
        q = ops.transpose(self.split_heads(self.query_projection(query), self.key_depth), (0, 2, 1, 3))
        k = ops.transpose(self.split_heads(self.key_projection(key), self.key_depth), (0, 2, 1, 3))
        v = ops.transpose(self.split_heads(self.value_projection(value)), (0, 2, 1, 3))
        if attention_mask is not None and len(attention_mask.shape) == 3:
            attention_mask = ops.expand_dims(attention_mask, axis=1)  # broadcast over heads
        attended = self.attention(
            q, k, v, attention_mask=attention_mask, training=training,
            return_attention_weights=return_attention_weights,
        )
        if return_attention_weights:
            attended, weights = attended
        attended = ops.transpose(attended, (0, 2, 1, 3))
        batch, length = ops.shape(attended)[0], ops.shape(attended)[1]
        outputs = self.output_projection(ops.reshape(attended, (batch, length, self.d_model)))
        if return_attention_weights:
            return outputs, weights
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "key_dim": self.key_dim,
            }
        )
        return config
