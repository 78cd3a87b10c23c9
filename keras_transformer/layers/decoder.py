"""Decoder layer and stack (paper section 3.1, right half of Figure 1)."""

import keras
from keras import ops

from keras_transformer.layers.encoder import _SublayerConfig


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(_SublayerConfig, keras.layers.Layer):
    """Causal self-attention, cross-attention over the encoder output, feed-forward.

    Each sub-layer has dropout, a residual connection and LayerNorm (post-LN by
    default, pre-LN with `norm_first=True`). Arguments as for `EncoderLayer`.

    `call(inputs, encoder_output, self_attention_mask, cross_attention_mask,
    self_attention_cache=None, cache_index=None, cross_attention_cache=None,
    return_attention_weights=False)` returns the layer output, followed by the
    updated self-attention cache when one is given, followed by the
    cross-attention weights (batch, heads, target, source) when asked for.
    Caches have shape (batch, 2, length, heads, d_model / heads); see
    `MultiHeadAttention`.
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._init_sublayer_config(
            d_model, num_heads, d_ff, dropout, attention_dropout,
            activation_dropout, activation, norm_first, layer_norm_epsilon,
        )
        self.self_attention = self._make_attention("self_attention")
        self.self_attention_norm = self._make_norm("self_attention_norm")
        self.cross_attention = self._make_attention("cross_attention")
        self.cross_attention_norm = self._make_norm("cross_attention_norm")
        self.feed_forward = self._make_feed_forward()
        self.feed_forward_norm = self._make_norm("feed_forward_norm")
        self.output_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def build(self, inputs_shape, encoder_output_shape=None):
        encoder_output_shape = encoder_output_shape or inputs_shape
        self.self_attention.build(inputs_shape, inputs_shape)
        self.self_attention_norm.build(inputs_shape)
        self.cross_attention.build(inputs_shape, encoder_output_shape)
        self.cross_attention_norm.build(inputs_shape)
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm.build(inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        encoder_output=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        self_attention_cache=None,
        cache_index=None,
        cross_attention_cache=None,
        training=None,
        return_attention_weights=False,
    ):
        def self_attend(h):
            if self_attention_cache is None:
                out = self.self_attention(
                    h, h, attention_mask=self_attention_mask, training=training
                )
                return out, None
            return self.self_attention(
                h,
                h,
                attention_mask=self_attention_mask,
                cache=self_attention_cache,
                cache_index=cache_index,
                training=training,
            )

        def cross_attend(h):
            results = self.cross_attention(
                h,
                encoder_output,
                attention_mask=cross_attention_mask,
                cache=cross_attention_cache,
                training=training,
                return_attention_weights=return_attention_weights,
            )
            if not isinstance(results, tuple):
                return results, None
            # (out, [cache,] [weights]); the cross-attention cache never changes.
            return results[0], (results[-1] if return_attention_weights else None)

        x, new_cache = self._residual(inputs, self_attend, self.self_attention_norm, training)
        x, weights = self._residual(x, cross_attend, self.cross_attention_norm, training)
        x, _ = self._residual(
            x,
            lambda h: (self.feed_forward(h, training=training), None),
            self.feed_forward_norm,
            training,
        )
        results = (x,)
        if self_attention_cache is not None:
            results += (new_cache,)
        if return_attention_weights:
            results += (weights,)
        return results[0] if len(results) == 1 else results

    def get_config(self):
        config = super().get_config()
        config.update(self._sublayer_config())
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(_SublayerConfig, keras.layers.Layer):
    """A stack of `num_layers` decoder layers; with pre-LN, a final LayerNorm.

    For incremental decoding the caches of all layers are stacked into one
    tensor each, (num_layers, batch, 2, length, heads, depth), so a decoding
    loop carries two tensors of fixed shape.
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        d_ff,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._init_sublayer_config(
            d_model, num_heads, d_ff, dropout, attention_dropout,
            activation_dropout, activation, norm_first, layer_norm_epsilon,
        )
        self.num_layers = int(num_layers)
        self.stacked_layers = [
            DecoderLayer(**self._sublayer_config(), dtype=self.dtype_policy, name=f"layer_{i}")
            for i in range(self.num_layers)
        ]
        self.final_norm = self._make_norm("final_norm") if self.norm_first else None

    def build(self, inputs_shape, encoder_output_shape=None):
        for layer in self.stacked_layers:
            layer.build(inputs_shape, encoder_output_shape)
        if self.final_norm is not None:
            self.final_norm.build(inputs_shape)
        self.built = True

    def empty_self_attention_cache(self, batch_size, max_length, dtype=None):
        """Zeros of shape (num_layers, batch, 2, max_length, heads, depth)."""
        depth = self.d_model // self.num_heads
        return ops.zeros(
            (self.num_layers, batch_size, 2, max_length, self.num_heads, depth),
            dtype=dtype or self.compute_dtype,
        )

    def cross_attention_cache(self, encoder_output):
        """Encoder keys/values projected once per sentence for every layer."""
        return ops.stack(
            [layer.cross_attention.project_key_value(encoder_output, encoder_output) for layer in self.stacked_layers],
            axis=0,
        )

    def call(
        self,
        inputs,
        encoder_output=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        self_attention_cache=None,
        cache_index=None,
        cross_attention_cache=None,
        training=None,
        return_attention_weights=False,
    ):
        x = inputs
        new_caches, all_weights = [], []
        for i, layer in enumerate(self.stacked_layers):
            results = layer(
                x,
                encoder_output,
                self_attention_mask=self_attention_mask,
                cross_attention_mask=cross_attention_mask,
                self_attention_cache=None if self_attention_cache is None else self_attention_cache[i],
                cache_index=cache_index,
                cross_attention_cache=None if cross_attention_cache is None else cross_attention_cache[i],
                training=training,
                return_attention_weights=return_attention_weights,
            )
            if isinstance(results, tuple):
                x = results[0]
                if self_attention_cache is not None:
                    new_caches.append(results[1])
                if return_attention_weights:
                    all_weights.append(results[-1])
            else:
                x = results
        if self.final_norm is not None:
            x = self.final_norm(x)
        outputs = (x,)
        if self_attention_cache is not None:
            outputs += (ops.stack(new_caches, axis=0),)
        if return_attention_weights:
            # (num_layers, batch, heads, target, source)
            outputs += (ops.stack(all_weights, axis=0),)
        return outputs[0] if len(outputs) == 1 else outputs

    def get_config(self):
        config = super().get_config()
        config.update(self._sublayer_config())
        config["num_layers"] = self.num_layers
        return config
