"""Position-wise feed-forward network (paper section 3.3)."""

import keras


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to every position alike.

    Args:
        d_model: input and output width.
        d_ff: inner width (2048 in the base model).
        activation: "relu" in the paper.
        dropout: dropout on the inner activations (tensor2tensor's "relu
            dropout"; not in the paper, 0 by default).
    """

    def __init__(self, d_model, d_ff, activation="relu", dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model = int(d_model)
        self.d_ff = int(d_ff)
        self.activation = keras.activations.get(activation)
        self.dropout = float(dropout)
        self.inner = keras.layers.Dense(
            self.d_ff, activation=self.activation, dtype=self.dtype_policy, name="inner"
        )
        self.inner_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.outer = keras.layers.Dense(self.d_model, dtype=self.dtype_policy, name="outer")

    def build(self, inputs_shape):
        self.inner.build(inputs_shape)
        self.outer.build(tuple(inputs_shape[:-1]) + (self.d_ff,))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.inner_dropout(self.inner(inputs), training=training)
        return self.outer(hidden)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "d_ff": self.d_ff,
                "activation": keras.activations.serialize(self.activation),
                "dropout": self.dropout,
            }
        )
        return config
