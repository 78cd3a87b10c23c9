"""Token embeddings and positional encodings (paper sections 3.4 and 3.5)."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Sine on even dimensions and cosine on odd ones, interleaved exactly as in
    the paper (some libraries concatenate the halves instead). Computed on the
    fly, so any sequence length works and there are no weights.

    `call(inputs, start_index=0)` returns the encoding for positions
    start_index .. start_index + length - 1, shaped like `inputs`
    (batch, length, d_model), to be added to the embeddings.
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = float(max_wavelength)

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length, d_model = shape[-2], shape[-1]
        positions = ops.cast(ops.arange(length) + start_index, "float32")
        # 2i for both members of each (sin, cos) pair: 0, 0, 2, 2, 4, 4, ...
        even_dims = ops.cast((ops.arange(d_model) // 2) * 2, "float32")
        inverse_frequency = ops.power(
            ops.cast(self.max_wavelength, "float32"), -even_dims / ops.cast(d_model, "float32")
        )
        angles = ops.expand_dims(positions, 1) * ops.expand_dims(inverse_frequency, 0)
        is_even = ops.equal(ops.arange(d_model) % 2, 0)
        encoding = ops.where(is_even, ops.sin(angles), ops.cos(angles))
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Learned position embeddings, the paper's alternative (Table 3, row E).

    Same interface as `SinusoidalPositionalEncoding`; lengths are limited to
    `max_length`.
    """

    def __init__(self, max_length, d_model, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = int(max_length)
        self.d_model = int(d_model)
        self.initializer = keras.initializers.get(initializer)

    def build(self, inputs_shape=None):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_length, self.d_model),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length = shape[-2]
        positions = ops.arange(length) + start_index
        encoding = ops.take(self.position_embeddings, positions, axis=0)
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_length": self.max_length,
                "d_model": self.d_model,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """Token embedding scaled by sqrt(d_model), reused as the pre-softmax projection.

    `call(ids)` embeds token ids; `call(x, mode="logits")` (or `logits(x)`)
    multiplies decoder outputs by the transposed embedding matrix, the paper's
    weight sharing between the embedding layers and the output projection.

    The matrix is initialised with standard deviation d_model^-0.5 so that the
    scaled embeddings have unit variance, comparable to the sinusoids.
    """

    def __init__(self, vocabulary_size, d_model, embeddings_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.d_model = int(d_model)
        if embeddings_initializer is None:
            embeddings_initializer = keras.initializers.RandomNormal(stddev=self.d_model**-0.5)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.scale = math.sqrt(self.d_model)

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocabulary_size, self.d_model),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def call(self, inputs, mode="embed"):
        if mode == "embed":
            ids = ops.cast(inputs, "int32")
            vectors = ops.take(self.embeddings, ids, axis=0)
            return ops.cast(vectors, self.compute_dtype) * ops.cast(self.scale, self.compute_dtype)
        if mode == "logits":
            return self.logits(inputs)
        raise ValueError(f"`mode` must be 'embed' or 'logits', got {mode!r}.")

    def logits(self, outputs):
        kernel = ops.cast(self.embeddings, outputs.dtype)
        return ops.matmul(outputs, ops.transpose(kernel))

    def compute_output_spec(self, inputs, mode="embed"):
        if mode == "logits":
            return keras.KerasTensor(tuple(inputs.shape[:-1]) + (self.vocabulary_size,), self.compute_dtype)
        return keras.KerasTensor(tuple(inputs.shape) + (self.d_model,), self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "d_model": self.d_model,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
