"""Export a trained translator to CTranslate2, the C++ inference engine.

The weights go through CTranslate2's public model-spec API
(`ctranslate2.specs.TransformerSpec`, built in `ctranslate2_spec.py`), not
through a converter of another toolkit's checkpoints, so nothing depends on
file formats we do not own.

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

from keras_transformer._folders import replace_folder
from keras_transformer.decoding.inputs import source_length_limit, truncate_source
from keras_transformer.data.special_tokens import BOS_ID, BOS_PIECE, EOS_ID, PAD_ID, PAD_PIECE, UNK_ID
from keras_transformer.export.ctranslate2_spec import (  # model_spec, optimized_spec: also this module's API
    DEFAULT_POSITIONS,
    import_ctranslate2,
    is_int8_model,
    model_spec,
    optimized_spec,
)

__all__ = [
    "QUANTIZATIONS", "CTRANSLATE2_OPTIONS_PATH", "export_ctranslate2", "ctranslate2_options",
    "CTranslate2Translator", "model_spec", "optimized_spec",
]

# What `ctranslate2.specs.ModelSpec.optimize` accepts (CTranslate2 4.x).
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16")
CTRANSLATE2_OPTIONS_PATH = "keras_transformer_export.json"
TOKENIZER_FILE = "sentencepiece.model"
# An imported Marian model's tokenizer: its folder (data/marian_tokenizer.py).
MARIAN_TOKENIZER_DIR = "marian_tokenizer"
_TEMP_PREFIX = ".tmp-ctranslate2-"


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
    ctranslate2 = import_ctranslate2()
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
    max_positions = max(DEFAULT_POSITIONS, max_input_length + max_extra_length + 1)
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
        ctranslate2 = import_ctranslate2()
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
