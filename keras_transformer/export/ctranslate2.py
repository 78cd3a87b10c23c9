"""Export a trained translator to CTranslate2, the C++ inference engine.

The weights go through CTranslate2's public model-spec API
(`ctranslate2.specs.TransformerSpec`), not through a converter of another
toolkit's checkpoints, so nothing depends on file formats we do not own:

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

The export directory holds the engine's `model.bin`, `config.json` and
vocabulary, the SentencePiece model (`sentencepiece.model`) and
`keras_transformer_export.json` (the search settings of the run). The
engine takes SentencePiece pieces, appends EOS to the source itself and
starts the target with BOS, as our search does.

Documented differences in the engine's beam search (see the README; the
first two are checked against its own scores in tests/tf/test_ctranslate2.py):
it normalises log-probabilities over the tokens it has not suppressed (all
but pad and BOS with `ctranslate2_options`), ours over the whole vocabulary;
its length penalty is `log P / length ** alpha`, our "length" rule
(`keras_transformer.decoding.penalty`; its `BeamSearch` keeps EOS in the
hypothesis while scoring, `include_eos_in_hypotheses`, so both count EOS),
not GNMT's `((5 + length) / 6) ** alpha`, our default; and its finished
hypotheses compete with live ones for beam slots (with a length penalty it
stops a sentence once `beam_size` hypotheses have finished). Greedy search
agrees with ours token for token; beam search without a length penalty
almost always does on a trained model.

Needs the optional `ctranslate2` package (`pip install
"keras-transformer-nmt[ctranslate2]"`); the rest of the package does not.
"""

import json
import os
import shutil
import tempfile

import numpy as np

from keras_transformer._folders import replace_folder
from keras_transformer.decoding.inputs import source_length_limit, truncate_source
from keras_transformer.data.special_tokens import (
    BOS_ID, BOS_PIECE, EOS_ID, EOS_PIECE, PAD_ID, PAD_PIECE, UNK_ID, UNK_PIECE,
)

__all__ = [
    "QUANTIZATIONS", "CTRANSLATE2_OPTIONS_PATH", "export_ctranslate2", "ctranslate2_options",
    "CTranslate2Translator",
]

# What `ctranslate2.specs.ModelSpec.optimize` accepts (CTranslate2 4.x).
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16")
CTRANSLATE2_OPTIONS_PATH = "keras_transformer_export.json"
TOKENIZER_FILE = "sentencepiece.model"
# An imported Marian model's tokenizer: its folder (data/marian_tokenizer.py).
MARIAN_TOKENIZER_DIR = "marian_tokenizer"
# Sinusoidal tables are written this long unless the search needs more.
_DEFAULT_POSITIONS = 1024
_TEMP_PREFIX = ".tmp-ctranslate2-"


def _import_ctranslate2():
    try:
        import ctranslate2
        import ctranslate2.specs  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "exporting to CTranslate2 needs the optional `ctranslate2` package: "
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


def model_spec(model, tokenizer=None, max_positions=_DEFAULT_POSITIONS, pieces=None):
    """The `ctranslate2.specs.TransformerSpec` holding `model`'s weights
    (float32), with the tokenizer's pieces as its vocabulary (or `pieces`,
    a list indexed by id, for a model without a tokenizer)."""
    ctranslate2 = _import_ctranslate2()
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


def ctranslate2_options(beam_size=4, alpha=0.6, max_extra_length=50, source_length=None, n_best=1,
                        learned_positions=None):
    """Keyword arguments for `ctranslate2.Translator.translate_batch` that run
    the engine's search with our conventions as far as they go.

    Pad and BOS are never produced (our search bans them), EOS may come first
    (`min_decoding_length=0`), and `max_decoding_length` is our limit for a
    source of `source_length` tokens (EOS included; the engine's limit is one
    per batch, so pass the batch's longest). `alpha` is given to the engine's
    own length penalty, which differs from ours (module docstring).
    `learned_positions` caps the limit (a learned position table's length).
    """
    options = dict(
        beam_size=beam_size,
        num_hypotheses=n_best,
        length_penalty=alpha,
        min_decoding_length=0,
        suppress_sequences=[[PAD_PIECE], [BOS_PIECE]],
        return_scores=True,
    )
    if source_length is not None:
        limit = source_length + max_extra_length
        options["max_decoding_length"] = max(1, limit if learned_positions is None else min(limit, learned_positions))
    return options


def is_int8_model(model):
    return any(getattr(layer, "quantization_mode", None) for layer in model._flatten_layers())


def optimized_spec(model, tokenizer, quantization="float32", max_positions=_DEFAULT_POSITIONS):
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


def export_ctranslate2(
    model,
    tokenizer,
    output_dir,
    *,
    quantization="float32",
    beam_size=4,
    alpha=0.6,
    max_extra_length=50,
    max_input_length=None,
    force=False,
    length_penalty=None,
):
    """Writes `model` and `tokenizer` as a CTranslate2 model directory.

    Args:
        model: a built `keras_transformer.Transformer` (any backend).
        tokenizer: its `keras_transformer.data.SubwordTokenizer`; the
            SentencePiece model is copied beside the engine's files.
        output_dir: the directory to create. It appears whole or not at all
            (written beside it, then renamed).
        quantization: the engine's weight type: "float32" (the same
            arithmetic as our float32 search), "int8", "int8_float32", ...
            (`QUANTIZATIONS`). A model quantized with
            `keras_transformer.export.quantize.quantize_model` exports
            with "int8" only: its int8 kernels and scales go to the engine
            as they are (no second quantization), the shared embedding and
            tied projection included.
        beam_size, alpha, max_extra_length, max_input_length: the run's
            search settings, recorded in `keras_transformer_export.json`
            for clients (the engine takes its options per call).
            `max_input_length` None: `Translator`'s and the SavedModel's
            default (`keras_transformer.decoding.inputs.source_length_limit`).
        length_penalty: the run's rule. The engine ranks by
            log P / length ** alpha, our "length" rule, whatever is given:
            None (default) exports with it and records, for a run of
            GNMT's penalty, that the engine's rule differs; "length" is
            reproduced; "gnmt" is refused unless alpha is 0 (both rules
            are then plain log P).
        force: replace an existing `output_dir`.

    Returns:
        `output_dir` (str).
    """
    ctranslate2 = _import_ctranslate2()
    if length_penalty not in (None, "gnmt", "length"):
        raise ValueError(f"`length_penalty` must be None, 'gnmt' or 'length', got {length_penalty!r}.")
    if length_penalty == "gnmt" and alpha != 0:
        raise ValueError(
            f"CTranslate2 ranks finished hypotheses by log P / length ** alpha (length_penalty 'length'): it "
            f"cannot reproduce GNMT's penalty with alpha {alpha}; export with length_penalty 'length' "
            "(--length-penalty length), or alpha 0 (plain log P)."
        )
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` must be one of {', '.join(QUANTIZATIONS)}; got {quantization!r}.")
    output_dir = os.fspath(output_dir)
    if os.path.exists(output_dir) and not force:
        raise FileExistsError(f"{output_dir} already exists (pass force=True, or --force, to replace it).")
    # A learned position table ends at the model's max_length: sources are
    # capped there (the wrapper cuts them, by the one truncation rule) and
    # outputs too, as our search caps them.
    learned_positions = model.max_length if model.positional_encoding == "learned" else None
    max_input_length = source_length_limit(model, max_input_length)
    max_positions = max(_DEFAULT_POSITIONS, max_input_length + max_extra_length + 1)
    spec = optimized_spec(model, tokenizer, quantization, max_positions=max_positions)
    quantized = is_int8_model(model)

    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    temp_dir = tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=parent)
    try:
        spec.save(temp_dir)
        if getattr(tokenizer, "model_type", None) == "marian":
            tokenizer.save(os.path.join(temp_dir, MARIAN_TOKENIZER_DIR))
            vocabulary = tokenizer.vocabulary()
            tokenizer_info = {
                "tokenizer": MARIAN_TOKENIZER_DIR, "tokenizer_kind": "marian",
                "target_language": tokenizer.target_language,
                "skip_pieces": sorted({vocabulary[i] for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)}),
            }
        else:
            with open(os.path.join(temp_dir, TOKENIZER_FILE), "wb") as stream:
                stream.write(tokenizer.proto)
            tokenizer_info = {"tokenizer": TOKENIZER_FILE}
        info = {
            "format": "ctranslate2",
            "ctranslate2_version": ctranslate2.__version__,
            "quantization": quantization,
            "int8_from_keras": bool(quantized),
            **tokenizer_info,
            "search": {
                "beam_size": beam_size, "alpha": alpha, "max_extra_length": max_extra_length,
                "max_input_length": max_input_length, "learned_positions": learned_positions,
                # The engine's rule (log P / length ** alpha), whatever the run's.
                "length_penalty": "length",
            },
            "length_penalty_note": (
                "CTranslate2 divides by length ** alpha (keras_transformer's length_penalty 'length'; both "
                "count EOS)" + ("" if length_penalty == "length" or alpha == 0 else
                                ", this run ranks by GNMT's ((5 + length) / 6) ** alpha")
                + ". Greedy agrees token for token."
            ),
            "model": {key: value for key, value in model.get_config().items()
                      if isinstance(value, (int, float, str, bool, type(None)))},
        }
        with open(os.path.join(temp_dir, CTRANSLATE2_OPTIONS_PATH), "w", encoding="utf-8") as stream:
            json.dump(info, stream, indent=2)
        replace_folder(temp_dir, output_dir)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return output_dir


class CTranslate2Translator:
    """Text in, text out through an export of `export_ctranslate2`, with the
    conventions of `keras_transformer.decoding.Translator`: a text without
    tokens translates to "", a source longer than `max_input_length` tokens
    (EOS included) is cut to its first `max_input_length - 1` tokens (counted
    in `last_truncated`), and each sentence may produce at most its source
    length (EOS included) plus `max_extra_length` tokens.

    Tokenizes with the `sentencepiece` package and searches with the engine
    (no model or TensorFlow graph of ours runs). Search settings default to
    those recorded at export time.

    Args:
        model_dir: the export directory.
        device, compute_type, inter_threads, intra_threads: passed to
            `ctranslate2.Translator`.
    """

    def __init__(self, model_dir, device="cpu", compute_type="default", inter_threads=1,
                 intra_threads=0):
        ctranslate2 = _import_ctranslate2()
        import sentencepiece

        model_dir = os.fspath(model_dir)
        info_path = os.path.join(model_dir, CTRANSLATE2_OPTIONS_PATH)
        try:
            with open(info_path, encoding="utf-8") as stream:
                self.info = json.load(stream)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{info_path} is missing: {model_dir} is not an export of keras_transformer's "
                "export_ctranslate2."
            ) from None
        self._marian = None
        if self.info.get("tokenizer_kind") == "marian":
            self._marian = _MarianText(os.path.join(model_dir, self.info["tokenizer"]), self.info)
        else:
            self.processor = sentencepiece.SentencePieceProcessor(
                model_file=os.path.join(model_dir, self.info["tokenizer"])
            )
        self.translator = ctranslate2.Translator(
            model_dir, device=device, compute_type=compute_type, inter_threads=inter_threads,
            intra_threads=intra_threads,
        )
        self.last_truncated = []

    def translate(self, texts, *, beam_size=None, alpha=None, max_extra_length=None,
                  max_input_length=None, max_batch_size=64, return_scores=False):
        """Translations of `texts` (and the engine's scores if asked).

        Sentences of equal source length go through the engine together, so
        that each gets our length limit (the engine takes one per batch).
        """
        search = self.info["search"]
        beam_size = search["beam_size"] if beam_size is None else beam_size
        alpha = search["alpha"] if alpha is None else alpha
        max_extra_length = search["max_extra_length"] if max_extra_length is None else max_extra_length
        max_input_length = search["max_input_length"] if max_input_length is None else max_input_length
        learned_positions = search.get("learned_positions")
        if learned_positions is not None:  # no positions beyond the learned table
            max_input_length = min(max_input_length, learned_positions)
        texts = list(texts)
        if self._marian is not None:  # pieces, which the engine looks up itself
            token_lists = [self._marian.pieces(text) for text in texts]
        else:
            token_lists = self.processor.encode(texts) if texts else []
        self.last_truncated, by_length = [], {}
        for index, tokens in enumerate(token_lists):
            source, cut = truncate_source(tokens, max_input_length)
            if cut:
                self.last_truncated.append(index)
            tokens = source[:-1]  # the engine appends EOS itself
            if tokens:
                by_length.setdefault(len(tokens), []).append((index, tokens))
        translations, scores = [""] * len(texts), [0.0] * len(texts)
        for length, group in sorted(by_length.items()):
            for start in range(0, len(group), max_batch_size):
                chunk = group[start : start + max_batch_size]
                results = self.translator.translate_batch(
                    [tokens if self._marian else [self.processor.id_to_piece(t) for t in tokens]
                     for _, tokens in chunk],
                    max_input_length=0,  # truncated above, by our rule
                    **ctranslate2_options(beam_size, alpha, max_extra_length, source_length=length + 1,
                                          learned_positions=learned_positions),
                )
                for (index, _), result in zip(chunk, results):
                    pieces = result.hypotheses[0]
                    translations[index] = (self._marian.text(pieces) if self._marian
                                           else self.processor.decode_pieces(pieces))
                    scores[index] = result.scores[0]
        return (translations, scores) if return_scores else translations


class _MarianText:
    """An imported Marian model's text <-> pieces in an export's folder
    (`keras_transformer.marian.pieces`' rules, without TensorFlow)."""

    def __init__(self, folder, info):
        import sentencepiece

        from keras_transformer.marian.pieces import SOURCE_SPM, TARGET_SPM, TARGET_VOCAB_FILE

        self.source = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, SOURCE_SPM))
        target = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, TARGET_SPM))
        # Transformers decodes with the source model unless the vocabularies are separate.
        self.decoding = target if os.path.isfile(os.path.join(folder, TARGET_VOCAB_FILE)) else self.source
        self.code = info.get("target_language")
        self.skip = frozenset(info.get("skip_pieces", ()))

    def pieces(self, text):
        from keras_transformer.marian.pieces import text_to_pieces

        return ([self.code] if self.code else []) + text_to_pieces(text, self.source)

    def text(self, pieces):
        from keras_transformer.marian.pieces import pieces_to_text

        return pieces_to_text(pieces, self.decoding, skip=self.skip)
