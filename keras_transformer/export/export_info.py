"""The files an export writes about itself beside the SavedModel: its settings as JSON and its tokenizer's model.

assets.extra/ holds files that "co-exist with the model but are not loaded by the graph" (the SavedModel
layout); TF Serving ignores it except for its warm-up records.
"""

import json
import os

import keras
import tensorflow as tf

from keras_transformer.export import batching as batching_lib
from keras_transformer.export import warmup as warmup_lib
from keras_transformer.export.signatures import (
    IDS_INPUT, IDS_LENGTHS_SIGNATURE, IDS_SIGNATURE, LENGTHS_INPUT, N_BEST_SIGNATURE, SCORE_SIGNATURE, SERVING_SIGNATURE,
    TEXT_INPUT,
)

EXPORT_INFO_PATH = os.path.join("assets.extra", "keras_transformer_export.json")
# The SentencePiece model, for clients of `translate_ids` that tokenize themselves.
TOKENIZER_PATH = os.path.join("assets.extra", "tokenizer.model")


def write_export_info(export_dir, model, tokenizer, translator, warmup_rows, quantization=None):
    """Writes EXPORT_INFO_PATH (what the export is: versions, signatures, search settings, quantization,
    warm-up, batching, tokenizer and model config) and TOKENIZER_PATH (the SentencePiece model, where the
    tokenizer has one) into `export_dir`; `translator` is the export's `SignatureFunctions`."""
    import keras_transformer

    # The XLA variant's fixed-size shortlist reports, per row, whether its batch's list overflowed the size and
    # the full search ran instead (`shortlist_overflow`).
    overflow = {"shortlist_overflow": "bool [batch]"} if translator.reports_overflow else {}
    info = {
        "keras_transformer_version": keras_transformer.__version__,
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "signatures": {
            SERVING_SIGNATURE: {"inputs": {TEXT_INPUT: "string [batch]"},
                                "outputs": {"translations": "string [batch]", "scores": "float32 [batch]",
                                            "truncated": "bool [batch]", **overflow}},
            IDS_SIGNATURE: {"inputs": {IDS_INPUT: "int32 [batch, length]: a row's ids up to its first pad (0) "
                                                  "or EOS; what follows is ignored"},
                            "outputs": {"ids": "int32 [batch, length], pad 0", "scores": "float32 [batch]",
                                        "truncated": "bool [batch]", **overflow}},
            IDS_LENGTHS_SIGNATURE: {"inputs": {IDS_INPUT: "int32 [batch, length]",
                                               LENGTHS_INPUT: "int32 [batch]: the ids of each row to read"},
                                    "outputs": {"ids": "int32 [batch, length], pad 0", "scores": "float32 [batch]",
                                                "truncated": "bool [batch]", **overflow}},
            **({N_BEST_SIGNATURE: {"inputs": {TEXT_INPUT: "string [batch]"},
                                   "outputs": {"translations": "string [batch, beam_size]",
                                               "scores": "float32 [batch, beam_size]",
                                               "log_probs": "float32 [batch, beam_size]",
                                               "counts": "int32 [batch]", "truncated": "bool [batch]"}}}
               if translator.beam_size > 1 else {}),
            SCORE_SIGNATURE: {"inputs": {"source": "string [batch]", "target": "string [batch]"},
                              "outputs": {"log_probs": "float32 [batch]", "scores": "float32 [batch]",
                                          "tokens": "int32 [batch]", "truncated": "bool [batch]"}},
        },
        "search": {
            "beam_size": translator.beam_size,
            "alpha": translator.alpha,
            "length_penalty": translator.length_penalty,
            "max_extra_length": translator.max_extra_length,
            "max_input_length": translator.max_input_length,
            "max_output_length": translator.max_output_length,
            "limit_rule": translator.limit_rule,
            "jit_compile": translator.jit_compile,
            "xla_phase_buckets": translator.xla_phase_buckets,
            "finer_phases": translator.finer_phases,
            "shortlist": None if translator.shortlist is None else {
                "settings": translator.shortlist.settings, "always": len(translator.shortlist.always),
                "size": translator.shortlist_size},
        },
        "quantization": quantization,
        # The XLA variant compiles the translation search only; these run in a plain graph in either
        # variant (in an int8 export: Keras' generic int8 kernel, not XLA's).
        "plain_graph_signatures": ([N_BEST_SIGNATURE] if translator.beam_size > 1 else []) + [SCORE_SIGNATURE]
        if translator.jit_compile else "all",
        "warmup": {"path": warmup_lib.WARMUP_PATH, "rows": warmup_rows,
                   "xla_min_rows": translator.xla_min_rows if translator.jit_compile else None,
                   "xla_shapes": ([[r, w] for r in warmup_lib.row_buckets(warmup_rows, translator.xla_min_rows)
                                   for w in warmup_lib.width_buckets(translator.max_input_length)]
                                  if translator.jit_compile else [])},
        "batching_parameters": {"path": batching_lib.BATCHING_PATH, **batching_lib.batching_parameters(
            jit_compile=translator.jit_compile, warmup_rows=warmup_rows, xla_min_rows=translator.xla_min_rows)},
        "tokenizer": {"vocabulary_size": tokenizer.vocabulary_size,
                      "model_type": getattr(tokenizer, "model_type", None)},
        "model": model.get_config(),
    }
    path = os.path.join(export_dir, EXPORT_INFO_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(info, stream, indent=2, default=str)
    proto = getattr(tokenizer, "proto", None)
    if proto is not None:
        with open(os.path.join(export_dir, TOKENIZER_PATH), "wb") as stream:
            stream.write(proto)
