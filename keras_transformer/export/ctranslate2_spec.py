"""`model`'s weights as CTranslate2's `TransformerSpec`, through the
engine's public model-spec API:

- every attention layer's query, key and value projections become the
  engine's fused projection (Keras kernels are (in, out), the engine's
  weights (out, in));
- post-LN or pre-LN (`pre_norm`), with the final LayerNorm of each stack
  only for pre-LN, as in our `Encoder` and `Decoder`;
- the shared embedding, scaled by sqrt(d_model), is the output projection
  too, exactly as `SharedEmbedding.logits`: with the model's `output_bias`
  (Marian's final_logits_bias) as the projection's bias, without one
  otherwise;
- positions: our own table, computed by the model's own layer, is written
  into the model in either layout (the paper's interleaved sines and
  cosines, which the engine's built-in table does not have, and Marian's
  concatenated halves, which it has: one code path for both); learned
  positions are copied;
- the feed-forward activation: relu, gelu (the engine's exact GELU),
  swish / silu (its SWISH).

The spec's vocabulary is the tokenizer's pieces (rows beyond them get names
never produced); `optimized_spec` validates and quantizes it as
`export_ctranslate2` saves it.
"""

import numpy as np

from keras_transformer.data.special_tokens import BOS_ID, BOS_PIECE, EOS_ID, EOS_PIECE, PAD_PIECE, UNK_ID, UNK_PIECE

# Sinusoidal tables are written this long unless the search needs more.
DEFAULT_POSITIONS = 1024


def import_ctranslate2():
    """The `ctranslate2` module, or an ImportError that says how to install it."""
    try:
        import ctranslate2
        import ctranslate2.specs  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "exporting to or running CTranslate2 needs the optional `ctranslate2` package: "
            'pip install "keras-transformer-nmt[ctranslate2]"'
        ) from error
    return ctranslate2


def _numpy(variable):
    from keras import ops

    return np.ascontiguousarray(ops.convert_to_numpy(variable), dtype=np.float32)


def _is_int8(dense):
    return getattr(dense, "quantization_mode", None) == "int8"


def _int8_kernel(dense):
    """An int8 Dense layer's (out, in) int8 kernel and (out,) scales, as Keras holds them
    (abs-max per output column: float = int8 / scale, CTranslate2's convention)."""
    from keras import ops

    kernel = np.ascontiguousarray(ops.convert_to_numpy(dense._kernel).T)
    scale = np.ascontiguousarray(ops.convert_to_numpy(dense.kernel_scale), dtype=np.float32).reshape(-1)
    if kernel.dtype != np.int8 or scale.shape != (kernel.shape[0],):
        raise ValueError(f"{dense.name}: unexpected int8 layout {kernel.dtype} {kernel.shape}, scale {scale.shape}")
    return kernel, scale


def _embedding_table(embedding):
    """A SharedEmbedding's (vocabulary, d_model) table and, when int8, its (vocabulary,) row scales
    (the int8 form holds the table transposed, as the projection's kernel)."""
    from keras import ops

    if getattr(embedding, "quantization_mode", None) != "int8":
        return _numpy(embedding.embeddings), None
    table = np.ascontiguousarray(ops.convert_to_numpy(embedding.projection_kernel).T)
    scale = np.ascontiguousarray(ops.convert_to_numpy(embedding.projection_scale), dtype=np.float32)
    return table, scale


def _set_table(spec, table):
    spec.weight, scale = table
    if scale is not None:
        spec.weight_scale = scale


def _linear(spec, dense):
    if _is_int8(dense):
        spec.weight, spec.weight_scale = _int8_kernel(dense)
    else:
        spec.weight = _numpy(dense.kernel).T.copy()
    if dense.bias is not None:
        spec.bias = _numpy(dense.bias)


def _fused_linear(spec, denses):
    """Several Dense layers over the same input as one (their outputs concatenated)."""
    if any(_is_int8(d) for d in denses):
        if not all(_is_int8(d) for d in denses):
            raise ValueError(f"{[d.name for d in denses]}: some are int8, some not: cannot fuse them")
        kernels, scales = zip(*(_int8_kernel(d) for d in denses))
        spec.weight = np.concatenate(kernels, axis=0)
        spec.weight_scale = np.concatenate(scales, axis=0)
    else:
        spec.weight = np.concatenate([_numpy(d.kernel).T for d in denses], axis=0)
    if all(d.bias is not None for d in denses):
        spec.bias = np.concatenate([_numpy(d.bias) for d in denses], axis=0)


def _layer_norm(spec, norm):
    spec.gamma = _numpy(norm.gamma)
    spec.beta = _numpy(norm.beta)


def _self_attention(spec, attention, norm):
    _fused_linear(spec.linear[0], [attention.query_projection, attention.key_projection,
                                   attention.value_projection])
    _linear(spec.linear[1], attention.output_projection)
    _layer_norm(spec.layer_norm, norm)


def _cross_attention(spec, attention, norm):
    _linear(spec.linear[0], attention.query_projection)
    _fused_linear(spec.linear[1], [attention.key_projection, attention.value_projection])
    _linear(spec.linear[2], attention.output_projection)
    _layer_norm(spec.layer_norm, norm)


def _feed_forward(spec, layer):
    _linear(spec.linear_0, layer.feed_forward.inner)
    _linear(spec.linear_1, layer.feed_forward.outer)
    _layer_norm(spec.layer_norm, layer.feed_forward_norm)


def _position_table(model, length):
    if model.positional_encoding == "learned":
        return _numpy(model.position_encoding.position_embeddings)
    # The model's own layer computes the table: the engine adds exactly what we add.
    from keras import ops

    zeros = ops.zeros((1, length, model.d_model), dtype="float32")
    return _numpy(ops.cast(model.position_encoding(zeros), "float32"))[0]


# Our activation names -> the engine's (`ctranslate2.specs.Activation`); Keras'
# "gelu" is the exact erf form, as the engine's GELU (GELUTanh is the other).
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "swish": "SWISH", "silu": "SWISH"}


def _activation(model, specs):
    activation = model.activation
    name = activation if isinstance(activation, str) else getattr(activation, "__name__", "")
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"the CTranslate2 export supports the feed-forward activations {', '.join(_ACTIVATIONS)}; "
            f"the model uses {activation!r}."
        )
    return getattr(specs.Activation, _ACTIVATIONS[name])


def _check_key_dim(model):
    key_dim = getattr(model, "key_dim", None)
    if key_dim is not None and key_dim * model.num_heads != model.d_model:
        raise ValueError(
            f"the CTranslate2 export needs d_k = d_model / num_heads ({model.d_model // model.num_heads}); "
            f"the model sets key_dim {key_dim}, which CTranslate2's TransformerSpec cannot express "
            f"(its query/key width is d_model)."
        )


def model_spec(model, tokenizer=None, max_positions=DEFAULT_POSITIONS, pieces=None):
    """The `ctranslate2.specs.TransformerSpec` holding `model`'s weights
    (float32), with the tokenizer's pieces as its vocabulary (or `pieces`,
    a list indexed by id, for a model without a tokenizer)."""
    ctranslate2 = import_ctranslate2()
    specs = ctranslate2.specs
    activation = _activation(model, specs)
    _check_key_dim(model)
    if not model.built:
        model.build()
    spec = specs.TransformerSpec.from_config(
        (model.num_encoder_layers, model.num_decoder_layers),
        model.num_heads,
        pre_norm=model.norm_first,
        activation=activation,
    )
    spec.config.layer_norm_epsilon = model.layer_norm_epsilon
    spec.config.unk_token = UNK_PIECE
    spec.config.bos_token = BOS_PIECE
    spec.config.eos_token = EOS_PIECE
    spec.config.decoder_start_token = BOS_PIECE
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True  # our sources are tokens + EOS

    positions = _position_table(model, max_positions)
    source_table = _embedding_table(model.source_embedding)
    target_table = (source_table if model.source_embedding is model.target_embedding
                    else _embedding_table(model.target_embedding))
    source_embeddings, target_embeddings = source_table[0], target_table[0]

    encoder, decoder = spec.encoder, spec.decoder
    _set_table(encoder.embeddings[0], source_table)
    encoder.scale_embeddings = True  # times sqrt(d_model), as SharedEmbedding
    encoder.position_encodings.encodings = positions
    for layer_spec, layer in zip(encoder.layer, model.encoder.stacked_layers):
        _self_attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm)
        _feed_forward(layer_spec.ffn, layer)
    if model.norm_first:
        _layer_norm(encoder.layer_norm, model.encoder.final_norm)

    _set_table(decoder.embeddings, target_table)
    decoder.scale_embeddings = True
    decoder.position_encodings.encodings = positions
    _set_table(decoder.projection, target_table)  # tied softmax
    if model.output_bias is not None:
        decoder.projection.bias = _numpy(model.output_bias)
    for layer_spec, layer in zip(decoder.layer, model.decoder.stacked_layers):
        _self_attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm)
        _cross_attention(layer_spec.attention, layer.cross_attention, layer.cross_attention_norm)
        _feed_forward(layer_spec.ffn, layer)
    if model.norm_first:
        _layer_norm(decoder.layer_norm, model.decoder.final_norm)

    pieces = list(tokenizer.vocabulary() if pieces is None else pieces)
    # A Marian model's sides may have vocabularies of their own.
    source_vocabulary = getattr(tokenizer, "source_vocabulary", None) if tokenizer is not None else None
    source_pieces = _padded_vocabulary(list(source_vocabulary()) if source_vocabulary else pieces,
                                       source_embeddings.shape[0])
    target_pieces = _padded_vocabulary(pieces, target_embeddings.shape[0])
    # Our special ids' pieces (an imported Marian vocabulary may name BOS otherwise).
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (
        target_pieces[UNK_ID], target_pieces[BOS_ID], target_pieces[EOS_ID])
    spec.config.decoder_start_token = target_pieces[BOS_ID]
    if source_pieces[0] != PAD_PIECE:
        raise ValueError(f"the tokenizer's id 0 is {source_pieces[0]!r}, expected {PAD_PIECE!r}.")
    spec.register_source_vocabulary(source_pieces)
    spec.register_target_vocabulary(target_pieces)
    return spec


def _padded_vocabulary(pieces, size):
    """The tokenizer's pieces, plus never-produced names for embedding rows beyond them."""
    if len(pieces) > size:
        raise ValueError(
            f"the tokenizer has {len(pieces)} pieces but the model's embedding has {size} rows: "
            "they were not trained together."
        )
    return pieces + [f"<keras_transformer_unused_{i}>" for i in range(len(pieces), size)]


def is_int8_model(model):
    """Whether any layer of `model` holds quantized (int8) weights."""
    return any(getattr(layer, "quantization_mode", None) for layer in model._flatten_layers())


def optimized_spec(model, tokenizer, quantization="float32", max_positions=DEFAULT_POSITIONS):
    """`model_spec`, validated and optimized for `quantization` as `export_ctranslate2` saves it."""
    if getattr(model, "keras_transformer_quantization", None) == "bfloat16":
        raise ValueError("the model holds bfloat16 weights: export the float32 model with "
                         "quantization='bfloat16' (or 'int8_bfloat16') instead.")
    quantized = [layer.name for layer in model._flatten_layers() if getattr(layer, "quantization_mode", None)]
    if quantized and quantization != "int8":
        raise ValueError(
            f"the model holds int8 weights ({len(quantized)} quantized layers): export it with "
            f"quantization='int8' (its weights as they are), not {quantization!r}."
        )
    spec = model_spec(model, tokenizer, max_positions=max_positions)
    spec.validate()
    # An int8 model's kernels are int8 already: optimizing with a quantization
    # would quantize them a second time (int8 values read as floats, their
    # scales replaced), so only aliasing runs.
    spec.optimize(quantization=None if quantized else quantization)
    return spec
