"""The residual sub-layer pattern of paper section 3.1 ("LayerNorm(x + Sublayer(x))"),
shared by the encoder and decoder layers and stacks."""

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import PositionwiseFeedForward


class ResidualSublayers:
    """What encoder and decoder layers (and stacks) share: their constructor
    arguments and config, the sub-layers they build (attention, feed-forward,
    LayerNorm) and the residual wiring around each sub-layer, post-LN or pre-LN.

    A mixin for `keras.layers.Layer` subclasses, which must define
    `self.output_dropout` before `_residual` is called.
    """

    def _init_sublayer_config(
        self,
        d_model,
        num_heads,
        d_ff,
        dropout,
        attention_dropout,
        activation_dropout,
        activation,
        norm_first,
        layer_norm_epsilon,
        key_dim=None,
    ):
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.d_ff = int(d_ff)
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.activation_dropout = float(activation_dropout)
        self.activation = activation
        self.norm_first = bool(norm_first)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.key_dim = None if key_dim is None else int(key_dim)

    def _sublayer_config(self):
        return {
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "activation_dropout": self.activation_dropout,
            "activation": self.activation,
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "key_dim": self.key_dim,
        }

    def _make_attention(self, name):
        return MultiHeadAttention(
            self.d_model,
            self.num_heads,
            dropout=self.attention_dropout,
            key_dim=self.key_dim,
            dtype=self.dtype_policy,
            name=name,
        )

    def _make_feed_forward(self):
        return PositionwiseFeedForward(
            self.d_model,
            self.d_ff,
            activation=self.activation,
            dropout=self.activation_dropout,
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def _make_norm(self, name):
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _residual(self, x, sublayer, norm, training):
        """Post-LN: norm(x + dropout(sublayer(x))); pre-LN: x + dropout(sublayer(norm(x))).

        `sublayer` maps its (possibly normalised) input to (output, extras).
        """
        inputs = norm(x) if self.norm_first else x
        output, extras = sublayer(inputs)
        x = x + self.output_dropout(output, training=training)
        if not self.norm_first:
            x = norm(x)
        return x, extras
