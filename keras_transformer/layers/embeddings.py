"""Token embeddings and positional encodings (paper sections 3.4 and 3.5)."""

import math

import keras
from keras import ops

# The arrangements of the sines and cosines in a SinusoidalPositionalEncoding.
SINUSOID_LAYOUTS = ("interleaved", "concatenated")


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    `layout="interleaved"` (the default): sine on even dimensions and cosine
    on odd ones, exactly as in the paper. `layout="concatenated"`: the same
    sines in the first half of the dimensions and the cosines in the second
    (column j = sin(pos / 10000^(2j/d)), column d/2 + j = cos(pos /
    10000^(2j/d))), the layout of Marian and of Transformers' MarianMT; for
    an odd d the sine half has one column more. Computed on the fly, so any
    sequence length works and there are no weights.

    `call(inputs, start_index=0)` returns the encoding for positions
    start_index .. start_index + length - 1, shaped like `inputs`
    (batch, length, d_model), to be added to the embeddings.
    """

    def __init__(self, max_wavelength=10000.0, layout="interleaved", **kwargs):
        super().__init__(**kwargs)
        if layout not in SINUSOID_LAYOUTS:
            raise ValueError(f"`layout` must be one of {', '.join(map(repr, SINUSOID_LAYOUTS))}; got {layout!r}.")
        self.max_wavelength = float(max_wavelength)
        self.layout = layout

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length, d_model = shape[-2], shape[-1]
        positions = ops.cast(ops.arange(length) + start_index, "float32")
        columns = ops.arange(d_model)
        if self.layout == "interleaved":
            # Frequency i for both members of each (sin, cos) pair: 0, 0, 1, 1, 2, 2, ...
            frequency, is_sine = columns // 2, ops.equal(columns % 2, 0)
        else:
            # The first ceil(d/2) columns are sines of frequencies 0, 1, ...; the rest cosines of 0, 1, ...
            half = (d_model + 1) // 2
            is_sine = ops.less(columns, half)
            frequency = ops.where(is_sine, columns, columns - half)
        inverse_frequency = ops.power(
            ops.cast(self.max_wavelength, "float32"),
            -ops.cast(2 * frequency, "float32") / ops.cast(d_model, "float32"),
        )
        angles = ops.expand_dims(positions, 1) * ops.expand_dims(inverse_frequency, 0)
        encoding = ops.where(is_sine, ops.sin(angles), ops.cos(angles))
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength, "layout": self.layout})
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

    `output_bias=True` adds a (vocabulary,) weight, `output_bias` (zeros
    at first; None without the option), to every logit the layer computes
    (Marian's `final_logits_bias`; the paper has none). It lives here so
    that every path projecting onto the vocabulary (training, the searches,
    shortlists, the exports) gets it; it stays float when the layer is
    quantized.

    `quantize("int8", config=...)` (called by Keras' `Model.quantize`)
    replaces the float matrix with an int8 copy for serving: the output
    projection's kernel, (d_model, vocabulary) like a Dense kernel, with one
    abs-max scale per vocabulary row (float = int8 / scale, Keras' and
    CTranslate2's convention). Lookups read the same int8 rows. With an
    activation quantizer in `config` (Keras' default) the decoder outputs are
    quantized per row and the logits come from an int8 x int8 product;
    without one the kernel is cast to float (weight-only int8).
    """

    def __init__(self, vocabulary_size, d_model, embeddings_initializer=None, output_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.d_model = int(d_model)
        self.use_output_bias = bool(output_bias)
        self.output_bias = None
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
        if self.use_output_bias:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(self.vocabulary_size,), initializer="zeros"
            )
        self.built = True

    def call(self, inputs, mode="embed"):
        if mode == "embed":
            ids = ops.cast(inputs, "int32")
            if self.quantization_mode == "int8":
                # Columns of the (d_model, vocabulary) kernel, moved last.
                rows = ops.moveaxis(ops.take(self.projection_kernel, ids, axis=1), 0, -1)
                row_scales = ops.expand_dims(ops.take(self.projection_scale, ids, axis=0), -1)
                vectors = ops.cast(rows, self.compute_dtype) / ops.cast(row_scales, self.compute_dtype)
            else:
                vectors = ops.cast(ops.take(self.embeddings, ids, axis=0), self.compute_dtype)
            return vectors * ops.cast(self.scale, self.compute_dtype)
        if mode == "logits":
            return self.logits(inputs)
        raise ValueError(f"`mode` must be 'embed' or 'logits', got {mode!r}.")

    def _int8_call(self, inputs, mode="embed"):
        # Keras routes a quantized layer's __call__ here; `call` reads the int8 form.
        return self.call(inputs, mode=mode)

    def logits(self, outputs, ids=None):
        """The tied projection's logits; with `ids` (a 1-D int tensor),
        only those vocabulary rows', in that order (a vocabulary shortlist).
        With `output_bias`, the bias of those rows is added."""
        if self.quantization_mode == "int8":
            logits = self._int8_logits(outputs, ids)
        else:
            kernel = self.embeddings if ids is None else ops.take(self.embeddings, ids, axis=0)
            # Not ops.einsum("...d,vd->...v"): 2.5x faster in TensorFlow's plain decoding graph
            # (benchmarks/results/serve_logits.jsonl) but several times slower a training step
            # in TensorFlow (its gradient), which doubled the test suite's training fixtures.
            logits = ops.matmul(outputs, ops.transpose(ops.cast(kernel, outputs.dtype)))
        if self.output_bias is None:
            return logits
        bias = self.output_bias if ids is None else ops.take(self.output_bias, ids, axis=0)
        return logits + ops.cast(bias, logits.dtype)

    def _int8_logits(self, outputs, ids=None):
        kernel, scale = self.projection_kernel, self.projection_scale
        if ids is not None:
            kernel, scale = ops.take(kernel, ids, axis=1), ops.take(scale, ids, axis=0)
        scale = ops.cast(scale, outputs.dtype)
        if self.inputs_quantizer is None:  # weight-only: a float product
            return ops.matmul(outputs, ops.cast(kernel, outputs.dtype)) / scale
        quantized, outputs_scale = self.inputs_quantizer(outputs, axis=-1)
        products = ops.matmul(quantized, kernel)  # int8 x int8 -> int32
        return ops.cast(products, outputs.dtype) / (ops.cast(outputs_scale, outputs.dtype) * scale)

    def quantize(self, mode=None, type_check=True, config=None):
        """The int8 form of the class docstring; `config` is a Keras
        `Int8QuantizationConfig` (None: activations quantized per row)."""
        from keras.quantizers import AbsMaxQuantizer

        if mode not in (None, "int8"):
            raise NotImplementedError(f"{type(self).__name__} quantizes to int8 only, not {mode!r}.")
        if self.quantization_mode is not None:
            raise ValueError(f"{self.name} is quantized already ({self.quantization_mode}).")
        if not self.built:
            raise ValueError(f"{self.name} must be built before it is quantized.")
        if config is None:
            self.inputs_quantizer = AbsMaxQuantizer(axis=-1)
        else:
            self.inputs_quantizer = config.activation_quantizer
        # Per vocabulary row: each logit (and each looked-up vector) has its own scale.
        kernel, scale = AbsMaxQuantizer(axis=-1)(self.embeddings, to_numpy=True)
        del self.embeddings  # Keras' quantize wrapper unlocks the tracker around this method
        self.projection_kernel = self.add_weight(
            name="projection_kernel", shape=(self.d_model, self.vocabulary_size), dtype="int8",
            initializer="zeros", trainable=False,
        )
        self.projection_scale = self.add_weight(
            name="projection_scale", shape=(self.vocabulary_size,), initializer="ones", trainable=False,
        )
        self.projection_kernel.assign(ops.transpose(kernel))
        self.projection_scale.assign(ops.reshape(scale, (-1,)))
        self._is_quantized = True  # before the policy: setting it would quantize again
        self.dtype_policy = keras.dtype_policies.get(f"int8_from_{self.dtype_policy.name}")

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
                "output_bias": self.use_output_bias,
            }
        )
        return config
