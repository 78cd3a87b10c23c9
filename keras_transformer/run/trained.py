"""A finished run: load it, evaluate it, measure its perplexity, export it.

Each function reads the run from its `output_dir` (`keras_transformer.run`
describes the layout) and takes its settings from the run's config.
"""

import json
import time
from pathlib import Path

import keras

from keras_transformer import config as config_lib
from keras_transformer.run.data import (
    CONFIG_FILE, MARIAN_TOKENIZER_DIR, MODEL_FILE, TOKENIZER_FILE, RunError, bucket_boundaries, read_pairs,
)
from keras_transformer.run.translate import translate_texts, with_target_language
from keras_transformer.training.precision import computing_in_float32


def load_tokenizer(output_dir):
    from keras_transformer.data import SubwordTokenizer

    path = Path(output_dir) / TOKENIZER_FILE
    marian = Path(output_dir) / MARIAN_TOKENIZER_DIR
    if not path.is_file() and marian.is_dir():
        from keras_transformer.data.marian_tokenizer import MarianTokenizer

        try:
            return MarianTokenizer.load(marian)
        except ValueError as error:
            raise RunError(str(error)) from None
    if not path.is_file():
        raise RunError(f"{path}: no tokenizer; run `keras-transformer train` first.")
    return SubwordTokenizer.load(str(path))


def load_model(output_dir):
    """The run's model, computing in float32 even where it was trained in mixed
    precision (`training.precision.computing_in_float32`: every path that
    decodes it then computes alike)."""
    path = Path(output_dir) / MODEL_FILE
    if not path.is_file():
        raise RunError(f"{path}: no trained model; run `keras-transformer train` first.")
    return computing_in_float32(keras.saving.load_model(str(path)))


def load_run(output_dir):
    """(model, tokenizer, config) of a finished run."""
    config_path = Path(output_dir) / CONFIG_FILE
    config = config_lib.defaults()
    if config_path.is_file():
        config = config_lib.merge(config, json.loads(config_path.read_text()), origin=str(config_path))
    return load_model(output_dir), load_tokenizer(output_dir), config


def _with_decoding(output_dir, decoding):
    model, tokenizer, config = load_run(output_dir)
    if decoding:
        config = config_lib.merge(config, {"decoding": decoding}, origin="decoding options")
    return model, tokenizer, config


def export(output_dir, base_dir=None, *, name="translator", version=None, decoding=None, jit_compile=False,
           check_ops=True, warmup_rows=None, quantize=None, shortlist=None, shortlist_size=None, xla_min_rows=None,
           xla_phase_buckets=None, finer_phases=False):
    """Exports the run's model and tokenizer as a SavedModel for TF Serving, with
    its decoding settings (`decoding` overrides some) and, as the input limit,
    the longest source seen in training (`data.max_length`). `base_dir`
    defaults to RUN/export; `warmup_rows` (default 64) bounds the requests
    the TF Serving warm-up records cover; `quantize` ("int8", "int8_weights",
    "bfloat16") exports lower-precision weights; `shortlist` (a file) bakes a
    vocabulary shortlist in, `shortlist_size` its fixed size in the XLA
    variant, `xla_min_rows` that variant's smallest row bucket and
    `xla_phase_buckets` its row buckets per decoding phase, `finer_phases`
    the plain variant's finer phases; returns the
    version directory."""
    from keras_transformer.export import export_saved_model
    from keras_transformer.export.warmup import DEFAULT_WARMUP_ROWS

    model, tokenizer, config = _with_decoding(output_dir, decoding)
    settings = config["decoding"]
    tokenizer = with_target_language(tokenizer, settings)
    return export_saved_model(
        model, tokenizer, str(base_dir or Path(output_dir) / "export"), name=name, version=version,
        beam_size=settings["beam_size"], alpha=settings["alpha"], max_extra_length=settings["max_extra_length"],
        max_input_length=config["data"]["max_length"], limit_rule=settings["limit_rule"],
        length_penalty=settings["length_penalty"],
        jit_compile=jit_compile, check_ops=check_ops,
        warmup_rows=DEFAULT_WARMUP_ROWS if warmup_rows is None else warmup_rows, quantize=quantize,
        shortlist=shortlist, shortlist_size=shortlist_size, xla_min_rows=xla_min_rows,
        xla_phase_buckets=xla_phase_buckets, finer_phases=finer_phases,
    )


def export_ctranslate2(output_dir, destination=None, *, quantization="float32", force=False, decoding=None,
                       quantize=None):
    """Exports the run to CTranslate2 (default RUN/export/ctranslate2-QUANTIZATION); returns the directory.
    `quantize` ("int8", "int8_weights"): the Keras int8 model's kernels go to the engine as they are."""
    from keras_transformer.export.ctranslate2 import export_ctranslate2 as export_model

    model, tokenizer, config = _with_decoding(output_dir, decoding)
    if quantize is not None:
        from keras_transformer.export.quantize import quantize_model

        model = quantize_model(model, quantize)
    settings = config["decoding"]
    tokenizer = with_target_language(tokenizer, settings)
    destination = destination or Path(output_dir) / "export" / f"ctranslate2-{quantization}"
    return export_model(
        model, tokenizer, destination, quantization=quantization, force=force, beam_size=settings["beam_size"],
        alpha=settings["alpha"], max_extra_length=settings["max_extra_length"],
        max_input_length=config["data"]["max_length"],
        # A run's "gnmt" (every run's default) exports as before, under the engine's own rule (noted in the
        # export); "gnmt" asked for in `decoding` (--length-penalty gnmt) is refused unless alpha is 0.
        length_penalty=(decoding or {}).get("length_penalty",
                                            "length" if settings["length_penalty"] == "length" else None),
    )


def validation_perplexity(output_dir, corpus=None, corpus_target=None):
    """Perplexity of the run's model on its validation split (or `corpus`):
    `evaluation.perplexity` over the run's batching (pairs longer than
    data.max_length tokens are left out, as in training). Returns its dict
    with "corpus" and "sentences" added."""
    from keras_transformer.decoding import evaluation
    from keras_transformer.data import make_dataset

    model, tokenizer, config = load_run(output_dir)
    if corpus:
        config["data"]["valid"], config["data"]["valid_target"] = corpus, corpus_target
    pairs = read_pairs(config, "valid")
    batches = make_dataset(pairs, tokenizer, tokens_per_batch=config["training"]["tokens_per_batch"],
                           max_length=config["data"]["max_length"], bucket_boundaries=bucket_boundaries(config),
                           training=False)
    result = evaluation.perplexity(model, batches, pad_id=model.pad_id)
    return {"corpus": config["data"]["valid"], "sentences": len(pairs), **result}


def evaluate(output_dir, corpus=None, corpus_target=None, limit=None, progress=True, decoding=None,
             result_path=None):
    """Translates a test corpus and scores it with sacreBLEU; writes the
    result to `result_path` (default: RUN/eval.json).

    `decoding` overrides the run's decoding settings (beam_size, alpha, ...).
    """
    from keras_transformer.decoding import evaluation

    model, tokenizer, config = load_run(output_dir)
    if decoding:
        config = config_lib.merge(config, {"decoding": decoding}, origin="decoding options")
    if corpus:
        config["data"]["test"], config["data"]["test_target"] = corpus, corpus_target
    pairs = read_pairs(config, "test")
    if limit:
        pairs = pairs[:limit]
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    start = time.time()
    truncated = []
    scores = evaluation.evaluate(
        model, tokenizer, sources, references, compound_split=False,
        translate=lambda texts: translate_texts(
            model, tokenizer, texts, config["decoding"], progress=progress,
            max_source_length=config["data"]["max_length"], truncated=truncated,
        ),
    )
    seconds = time.time() - start
    hypotheses = scores.pop("translations")
    exact = scores.pop("exact_match")
    result = {
        "corpus": config["data"]["test"],
        "sentences": len(pairs),
        "exact_match": exact,
        "seconds": seconds,
        # Sources over data.max_length tokens, translated from their first part.
        "truncated_sources": len(truncated),
        "decoding": config["decoding"],
        **scores,
    }
    Path(result_path or Path(output_dir) / "eval.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    samples = list(zip(sources, hypotheses, references))[:5]
    return result, samples
