"""Encoder layer and stack (paper section 3.1, left half of Figure 1)."""

import keras

from keras_transformer.layers.residual_sublayers import ResidualSublayers


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(ResidualSublayers, keras.layers.Layer):
    """Self-attention then feed-forward, each with dropout, residual and LayerNorm.

    Args:
        d_model, num_heads, d_ff: sizes (512, 8, 2048 in the base model).
        dropout: P_drop on every sub-layer output before the residual add.
        attention_dropout: dropout on attention weights (0 in the paper).
        activation_dropout: dropout inside the feed-forward network (0 in the paper).
        norm_first: False for the paper's post-LN, True for pre-LN.
        layer_norm_epsilon: LayerNorm epsilon.
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
        self.feed_forward = self._make_feed_forward()
        self.feed_forward_norm = self._make_norm("feed_forward_norm")
        self.output_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def build(self, inputs_shape):
        self.self_attention.build(inputs_shape, inputs_shape)
        self.self_attention_norm.build(inputs_shape)
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm.build(inputs_shape)
        self.built = True

    def call(self, inputs, attention_mask=None, training=None):
        """inputs: (batch, length, d_model); attention_mask: boolean, (batch, 1 or length, length)."""
        x, _ = self._residual(
            inputs,
            lambda h: (self.self_attention(h, h, attention_mask=attention_mask, training=training), None),
            self.self_attention_norm,
            training,
        )
        x, _ = self._residual(
            x,
            lambda h: (self.feed_forward(h, training=training), None),
            self.feed_forward_norm,
            training,
        )
        return x

    def get_config(self):
        config = super().get_config()
        config.update(self._sublayer_config())
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(ResidualSublayers, keras.layers.Layer):
    """A stack of `num_layers` encoder layers; with pre-LN, a final LayerNorm.

    Takes embedded inputs (token embedding + position, after dropout), so that
    it composes with any embedding scheme.
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
            EncoderLayer(**self._sublayer_config(), dtype=self.dtype_policy, name=f"layer_{i}")
            for i in range(self.num_layers)
        ]
        self.final_norm = self._make_norm("final_norm") if self.norm_first else None

    def build(self, inputs_shape):
        for layer in self.stacked_layers:
            layer.build(inputs_shape)
        if self.final_norm is not None:
            self.final_norm.build(inputs_shape)
        self.built = True

    def call(self, inputs, attention_mask=None, training=None):
        x = inputs
        for layer in self.stacked_layers:
            x = layer(x, attention_mask=attention_mask, training=training)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x

    def get_config(self):
        config = super().get_config()
        config.update(self._sublayer_config())
        config["num_layers"] = self.num_layers
        return config
