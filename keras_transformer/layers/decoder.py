"""Decoder layer and stack (paper section 3.1, right half of Figure 1)."""

import keras
from keras import ops

from keras_transformer.layers.residual_sublayers import ResidualSublayers


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(ResidualSublayers, keras.layers.Layer):
    """Causal self-attention, cross-attention over the encoder output, feed-forward.

    Each sub-layer has dropout, a residual connection and LayerNorm (post-LN by
    default, pre-LN with `norm_first=True`). Arguments as for `EncoderLayer`.

    `call(inputs, encoder_output, self_attention_mask, cross_attention_mask,
    return_attention_weights=False)` returns the layer output, followed by the
    cross-attention weights (batch, heads, target, source) when asked for.
    Incremental decoding runs the same wiring through `residual_blocks`.
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
        key_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._init_sublayer_config(
            d_model, num_heads, d_ff, dropout, attention_dropout,
            activation_dropout, activation, norm_first, layer_norm_epsilon, key_dim,
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

    def residual_blocks(self, inputs, self_attend, cross_attend, training=None):
        """The layer's wiring around attention functions it is given.

        `self_attend(h)` and `cross_attend(h)` map the (possibly normalised)
        sub-layer input to `(output, extras)`; the residual connections, the
        norms, dropout and the feed-forward network are the layer's own.
        `call` passes full attention; incremental decoding
        (`keras_transformer.models.incremental`) passes attention over its
        caches, so both run the same post-LN or pre-LN layer. Returns
        `(outputs, self_attention_extras, cross_attention_extras)`.
        """
        x, self_extras = self._residual(inputs, self_attend, self.self_attention_norm, training)
        x, cross_extras = self._residual(x, cross_attend, self.cross_attention_norm, training)
        x, _ = self._residual(
            x,
            lambda h: (self.feed_forward(h, training=training), None),
            self.feed_forward_norm,
            training,
        )
        return x, self_extras, cross_extras

    def call(
        self,
        inputs,
        encoder_output=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        training=None,
        return_attention_weights=False,
    ):
        def self_attend(h):
            return self.self_attention(h, h, attention_mask=self_attention_mask, training=training), None

        def cross_attend(h):
            results = self.cross_attention(
                h,
                encoder_output,
                attention_mask=cross_attention_mask,
                training=training,
                return_attention_weights=return_attention_weights,
            )
            return results if return_attention_weights else (results, None)

        x, _, weights = self.residual_blocks(inputs, self_attend, cross_attend, training)
        return (x, weights) if return_attention_weights else x

    def get_config(self):
        config = super().get_config()
        config.update(self._sublayer_config())
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(ResidualSublayers, keras.layers.Layer):
    """A stack of `num_layers` decoder layers; with pre-LN, a final LayerNorm.

    Incremental decoding (one position at a time, with key/value caches) is
    the model's: see `Transformer.incremental_decoder`.
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
        key_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._init_sublayer_config(
            d_model, num_heads, d_ff, dropout, attention_dropout,
            activation_dropout, activation, norm_first, layer_norm_epsilon, key_dim,
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

    def call(
        self,
        inputs,
        encoder_output=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        training=None,
        return_attention_weights=False,
    ):
        x = inputs
        all_weights = []
        for layer in self.stacked_layers:
            x = layer(
                x,
                encoder_output,
                self_attention_mask=self_attention_mask,
                cross_attention_mask=cross_attention_mask,
                training=training,
                return_attention_weights=return_attention_weights,
            )
            if return_attention_weights:
                x, weights = x
                all_weights.append(weights)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if return_attention_weights:
            # (num_layers, batch, heads, target, source)
            return x, ops.stack(all_weights, axis=0)
        return x

    def get_config(self):
        config = super().get_config()
        config.update(self._sublayer_config())
        config["num_layers"] = self.num_layers
        return config
