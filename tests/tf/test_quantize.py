"""int8 serving: `quantize_model`, `export_saved_model(quantize=...)`, CTranslate2 int8 from Keras int8.

On a small model trained for 800 steps on the synthetic corpus:
the int8 copy leaves the float model untouched; its SavedModel (plain and
XLA variants) stores int8 kernels, multiplies int8 by int8 and passes the op
check; the SavedModel translates as the int8 model does in process
(`Translator`); its BLEU and its agreement with float32 stay close; and the
CTranslate2 export takes its int8 kernels and scales as they are.
"""

import json
import os
from pathlib import Path

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from required_imports import required
from keras_transformer import cli
from keras_transformer.decoding import Translator
from keras_transformer.export import export_saved_model
from keras_transformer.export.quantize import check_int8_export, int8_dense_layers, int8_layers, quantize_model

ctranslate2 = required("ctranslate2")  # under CI=true a missing package fails the module instead of skipping it
from test_ctranslate2 import ENGINE_THREADS  # noqa: E402
from keras_transformer.export.ctranslate2 import (  # noqa: E402
    ctranslate2_options,
    export_ctranslate2,
    optimized_spec,
)

BEAM, ALPHA, EXTRA = 4, 0.6, 10
MAX_INPUT = 48


@pytest.fixture(scope="module")
def trained_run(easy_synthetic_run, easy_synthetic_model):
    """A small model trained for 800 steps on the synthetic corpus's easy
    categories (the run test_ctranslate2 uses too, see tests/tf/conftest.py),
    and 80 of its held-out pairs."""
    run, test = easy_synthetic_run
    model, tokenizer, config = easy_synthetic_model
    assert config["data"]["max_length"] == MAX_INPUT
    assert (config["decoding"]["beam_size"], config["decoding"]["alpha"]) == (BEAM, ALPHA)
    return run, model, tokenizer, test[:80]


@pytest.fixture(scope="module")
def trained(trained_run):
    return trained_run[1:]


@pytest.fixture(scope="module")
def int8_model(trained):
    model, _, _ = trained
    return quantize_model(model, "int8")


def translator(model, tokenizer):
    return Translator(model, tokenizer, beam_size=BEAM, alpha=ALPHA, max_extra_length=EXTRA,
                      max_source_length=MAX_INPUT)


@pytest.fixture(scope="module")
def translations(trained, int8_model):
    model, tokenizer, test = trained
    sources = [en for en, _ in test]
    return {"float32": translator(model, tokenizer).translate(sources),
            "int8": translator(int8_model, tokenizer).translate(sources)}


def export(model, tokenizer, base, jit_compile=False, beam_size=BEAM, **options):
    return export_saved_model(model, tokenizer, base, beam_size=beam_size, alpha=ALPHA, max_extra_length=EXTRA,
                              max_input_length=MAX_INPUT, jit_compile=jit_compile, warmup_rows=8, **options)


@pytest.fixture(scope="module")
def int8_exports(trained_run, tmp_path_factory):
    """The int8 SavedModels. The plain variant is the command line's
    (`export --quantize int8`: the run's beam size, alpha and input limit,
    which are BEAM, ALPHA and MAX_INPUT), so that the tests below check what
    it writes without a second export; the XLA variant is
    `export_saved_model`'s."""
    run_dir, model, tokenizer, _ = trained_run
    base = tmp_path_factory.mktemp("int8-exports")
    assert cli.main(["export", str(run_dir), "--base-dir", str(base / "plain"), "--quantize", "int8",
                     "--warmup-rows", "8", "--max-extra-length", str(EXTRA)]) == 0
    return {"plain": str(base / "plain" / "translator" / "1"),
            "xla": export(model, tokenizer, base / "xla", jit_compile=True, quantize="int8")}


def test_quantize_model_copies(trained, int8_model):
    model, _, _ = trained
    assert all(v.dtype == "float32" for v in model.weights)  # the float model is untouched
    layers = int8_dense_layers(int8_model)
    # 2 encoder layers x (4 attention + 2 feed-forward) + 2 decoder layers x (8 + 2).
    assert len(layers) == 2 * 6 + 2 * 10
    for layer in layers:
        assert keras.ops.convert_to_numpy(layer._kernel).dtype == np.int8
    with pytest.raises(ValueError, match="quantized already"):
        quantize_model(int8_model)


@pytest.mark.parametrize("variant", ["plain", "xla"])
def test_int8_export_round_trip_and_op_check(variant, int8_exports, int8_model):
    export_dir = int8_exports[variant]  # exported with check_ops=True: op check and int8 check passed
    found = check_int8_export(export_dir, "int8", expected_kernels=len(int8_layers(int8_model)))
    assert found["int8_products"] > 0
    info = json.loads(Path(export_dir, "assets.extra", "keras_transformer_export.json").read_text())
    assert info["quantization"] == "int8"
    if variant == "plain":
        from keras_transformer.export import check_serving_ops

        check_serving_ops(export_dir)  # a stock TF Serving runs the int8 plain variant


def test_int8_check_rejects_a_float_export(trained, tmp_path):
    model, tokenizer, _ = trained
    # The trained float model's SavedModel with greedy search: the same float
    # weights as a beam export, which the check reads first and refuses on,
    # for fewer signatures to trace (no n-best).
    float_dir = export(model, tokenizer, tmp_path, check_ops=False, beam_size=1)
    with pytest.raises(ValueError, match="no int8 variable"):
        check_int8_export(float_dir)


def test_weight_only_mode_is_checked_as_such(trained, int8_exports, tmp_path):
    model, tokenizer, _ = trained
    # Greedy search (fewer signatures to trace): the products checked are the model's layers', as in a beam export.
    weights_dir = export(model, tokenizer, tmp_path, quantize="int8_weights", beam_size=1)
    assert check_int8_export(weights_dir, "int8_weights")["int8_products"] == 0
    with pytest.raises(ValueError, match="no int8 x int8 product"):
        check_int8_export(weights_dir, "int8")
    with pytest.raises(ValueError, match="mode 'int8_weights'"):
        check_int8_export(int8_exports["plain"], "int8_weights")


@pytest.mark.parametrize("variant", ["plain", "xla"])
def test_saved_model_translates_as_the_int8_model_in_process(variant, trained, int8_exports, translations):
    _, _, test = trained
    # The XLA variant on 16 sentences (one padded shape to compile, minutes less on a busy CPU).
    count = len(test) if variant == "plain" else 16
    sources = [en for en, _ in test[:count]]
    signature = tf.saved_model.load(int8_exports[variant]).signatures["serving_default"]
    served = [t.decode("utf-8") for t in signature(text=tf.constant(sources))["translations"].numpy()]
    same = sum(a == b for a, b in zip(served, translations["int8"][:count]))
    # Ties in the rounding of quantized activations may part a rare sentence.
    assert same >= 0.97 * len(sources), [(a, b) for a, b in zip(served, translations["int8"]) if a != b][:5]


def test_int8_bleu_stays_close_to_float32(trained, translations):
    _, _, test = trained
    references = [[de for _, de in test]]
    bleu = {name: sacrebleu.corpus_bleu(outputs, references).score for name, outputs in translations.items()}
    agreement = np.mean([a == b for a, b in zip(translations["float32"], translations["int8"])])
    print(f"BLEU float32 {bleu['float32']:.2f}, int8 {bleu['int8']:.2f}; identical {agreement:.1%}")
    assert bleu["float32"] > 10, bleu  # the model learned something: the distance means something
    assert abs(bleu["int8"] - bleu["float32"]) <= 1.0, bleu
    assert agreement >= 0.8, agreement


def as_array(value):
    """A spec variable as numpy (the engine's optimize step wraps arrays in its Variable class)."""
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def spec_linears(spec, model):
    """(spec linear, the Dense layers whose outputs it stacks) for every linear of CTranslate2's
    TransformerSpec, from its documented layout: self-attention's linear[0] is query, key and value
    fused, linear[1] the output; cross-attention's linear[0] the query, linear[1] key and value fused,
    linear[2] the output; the feed-forward's linear_0 and linear_1."""
    def self_attention(linears, attention):
        return [(linears[0], [attention.query_projection, attention.key_projection, attention.value_projection]),
                (linears[1], [attention.output_projection])]

    def feed_forward(ffn, layer):
        return [(ffn.linear_0, [layer.feed_forward.inner]), (ffn.linear_1, [layer.feed_forward.outer])]

    pairs = []
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.stacked_layers, strict=True):
        pairs += self_attention(layer_spec.self_attention.linear, layer.self_attention)
        pairs += feed_forward(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.stacked_layers, strict=True):
        pairs += self_attention(layer_spec.self_attention.linear, layer.self_attention)
        cross, attention = layer_spec.attention.linear, layer.cross_attention
        pairs += [(cross[0], [attention.query_projection]),
                  (cross[1], [attention.key_projection, attention.value_projection]),
                  (cross[2], [attention.output_projection])]
        pairs += feed_forward(layer_spec.ffn, layer)
    return pairs


def test_ctranslate2_int8_takes_the_kernels_as_they_are(trained, int8_model, tmp_path):
    _, tokenizer, test = trained
    # The spec as the export saves it (after the engine's optimize step): every int8 Dense layer's
    # kernel (transposed to CTranslate2's (out, in)) and per-output scales, exactly, in its place.
    spec = optimized_spec(int8_model, tokenizer, "int8")
    checked = []
    for linear, denses in spec_linears(spec, int8_model):
        np.testing.assert_array_equal(
            as_array(linear.weight), np.concatenate([keras.ops.convert_to_numpy(d._kernel).T for d in denses]))
        np.testing.assert_array_equal(
            as_array(linear.weight_scale),
            np.concatenate([keras.ops.convert_to_numpy(d.kernel_scale).reshape(-1) for d in denses]))
        checked += denses
    assert len(checked) == 32  # 2 encoder layers x 6 + 2 decoder layers x 10, each once:
    assert {id(d) for d in checked} == {id(d) for d in int8_dense_layers(int8_model)}
    with pytest.raises(ValueError, match="quantization='int8'"):
        export_ctranslate2(int8_model, tokenizer, tmp_path / "float", quantization="float32")
    directory = export_ctranslate2(int8_model, tokenizer, tmp_path / "ct2", quantization="int8",
                                   max_input_length=MAX_INPUT, max_extra_length=EXTRA)
    info = json.loads(Path(directory, "keras_transformer_export.json").read_text())
    assert info["int8_from_keras"] is True
    engine = ctranslate2.Translator(directory, device="cpu", compute_type="int8", intra_threads=ENGINE_THREADS)
    pieces = tokenizer.vocabulary()
    greedy = Translator(int8_model, tokenizer, beam_size=1, max_extra_length=EXTRA, max_source_length=MAX_INPUT)
    sources = greedy.token_ids([en for en, _ in test])
    ours, _ = greedy.translate_ids([source + [3] for source in sources])
    engine_ids = [None] * len(sources)
    by_length = {}
    for index, source in enumerate(sources):
        by_length.setdefault(len(source), []).append(index)
    for length, indices in by_length.items():  # one call per length: the engine's limit is per call
        results = engine.translate_batch([[pieces[t] for t in sources[i]] for i in indices],
                                         **ctranslate2_options(1, 0.0, EXTRA, source_length=length + 1))
        for index, result in zip(indices, results):
            engine_ids[index] = [tokenizer.piece_to_id(p) for p in result.hypotheses[0]]
    same = np.mean([list(a) == list(b) for a, b in zip(engine_ids, ours)])
    print(f"CTranslate2 int8 (from Keras int8) greedy agrees with ours int8 on {same:.1%}")
    # Same int8 weights (embedding included); the engine's kernels round and sum differently.
    assert same >= 0.8, same


def test_bad_quantize_names_the_argument(trained, tmp_path):
    model, tokenizer, _ = trained
    with pytest.raises(ValueError, match="`quantize` must be None or one of int8, int8_weights"):
        export(model, tokenizer, tmp_path, quantize="int4")
    assert not (tmp_path / "translator").exists() or not os.listdir(tmp_path / "translator")


def test_cli_exports_int8(trained_run, int8_exports, tmp_path):
    run_dir = trained_run[0]
    # The SavedModel the command wrote (the tests above check its kernels,
    # its products, its op list and its translations).
    info = json.loads(Path(int8_exports["plain"], "assets.extra", "keras_transformer_export.json").read_text())
    assert info["quantization"] == "int8" and info["warmup"]["rows"] == 8
    assert cli.main(["export", str(run_dir), "--format", "ctranslate2", "--quantize", "int8",
                     "--output", str(tmp_path / "ct2")]) == 0
    info = json.loads((tmp_path / "ct2" / "keras_transformer_export.json").read_text())
    assert info["quantization"] == "int8" and info["int8_from_keras"] is True
    with pytest.raises(SystemExit, match="--quantization int8"):
        cli.main(["export", str(run_dir), "--format", "ctranslate2", "--quantize", "int8",
                  "--quantization", "float32", "--output", str(tmp_path / "ct2-bad")])
