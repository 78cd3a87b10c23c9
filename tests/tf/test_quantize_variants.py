"""The int8 shared embedding and the bfloat16 variant (`quantize_model`, `export_saved_model(quantize=...)`).

int8 now covers the tied output projection: the embedding's int8 kernel and
per-row scales are checked against a quantization written here in numpy,
and the CTranslate2 export takes them as they are. bfloat16: on a small
model trained for a few hundred steps on the synthetic corpus, the
SavedModel (plain and XLA) holds bfloat16 weights and multiplies in
bfloat16 (op check), translates as the bfloat16 model does in process, and
its BLEU stays close to float32's. The op checks are shown to fail on
SavedModels that break their rule.
"""

import json
from pathlib import Path

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from keras_transformer import cli
from required_imports import required
from keras_transformer.decoding import Translator
from keras_transformer.export import export_saved_model
from keras_transformer.export.quantize import (
    check_bfloat16_export,
    check_int8_export,
    int8_dense_layers,
    int8_layers,
    quantize_model,
)

BEAM, ALPHA, EXTRA = 4, 0.6, 10
MAX_INPUT = 48


@pytest.fixture(scope="module")
def trained_run(easy_synthetic_run, easy_synthetic_model):
    """The small model test_quantize.py and test_ctranslate2.py use (tests/tf/conftest.py: trained once
    per test run, loaded once per worker), and 80 of its held-out pairs."""
    run, test = easy_synthetic_run
    model, tokenizer, config = easy_synthetic_model
    assert config["data"]["max_length"] == MAX_INPUT
    return run, model, tokenizer, test[:80]


@pytest.fixture(scope="module")
def trained(trained_run):
    return trained_run[1:]


@pytest.fixture(scope="module")
def bfloat16_model(trained):
    return quantize_model(trained[0], "bfloat16")


@pytest.fixture(scope="module")
def int8_models(trained):
    return {mode: quantize_model(trained[0], mode) for mode in ("int8", "int8_weights")}


def translator(model, tokenizer):
    return Translator(model, tokenizer, beam_size=BEAM, alpha=ALPHA, max_extra_length=EXTRA,
                      max_source_length=MAX_INPUT)


@pytest.fixture(scope="module")
def translations(trained, bfloat16_model):
    model, tokenizer, test = trained
    sources = [en for en, _ in test]
    return {"float32": translator(model, tokenizer).translate(sources),
            "bfloat16": translator(bfloat16_model, tokenizer).translate(sources)}


@pytest.fixture(scope="module")
def bfloat16_exports(trained, tmp_path_factory):
    model, tokenizer, _ = trained
    base = tmp_path_factory.mktemp("bfloat16-exports")
    return {variant: export_saved_model(model, tokenizer, base / variant, beam_size=BEAM, alpha=ALPHA,
                                        max_extra_length=EXTRA, max_input_length=MAX_INPUT,
                                        jit_compile=variant == "xla", warmup_rows=8, quantize="bfloat16")
            for variant in ("plain", "xla")}


def hand_int8(values, axis):
    """Abs-max int8 along `axis`, written here: (int8 values, scales) with float = int8 / scale."""
    scale = 127.0 / (np.abs(values).max(axis=axis, keepdims=True) + keras.backend.epsilon())
    return np.clip(np.round(values * scale), -127, 127), scale


def test_int8_embedding_is_the_hand_quantized_table(trained, int8_models):
    model, _, _ = trained
    float_table = keras.ops.convert_to_numpy(model.target_embedding.embeddings)
    for mode, int8_model in int8_models.items():
        embedding = int8_model.target_embedding
        assert embedding.quantization_mode == "int8"
        assert [w.dtype for w in embedding.weights] == ["int8", "float32"]  # no float table left
        rows, scales = hand_int8(float_table, axis=1)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(embedding.projection_kernel), rows.T)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(embedding.projection_scale), scales[:, 0], rtol=1e-6)
        outputs = np.random.default_rng(0).normal(size=(3, 1, model.d_model)).astype("float32")
        if mode == "int8":  # decoder outputs quantized per row, an integer product
            quantized, output_scales = hand_int8(outputs, axis=-1)
            expected = (quantized @ rows.T) / (output_scales * scales[:, 0])
        else:
            expected = (outputs @ rows.T) / scales[:, 0]
        np.testing.assert_allclose(keras.ops.convert_to_numpy(embedding.logits(outputs)), expected,
                                   rtol=1e-5, atol=1e-4)
        ids = np.array([[5, 9, 3, 0]])
        expected_vectors = rows[ids] / scales[ids] * np.sqrt(model.d_model)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(embedding(ids)), expected_vectors, rtol=1e-5)


def test_int8_model_counts_the_embedding_kernel(trained, int8_models):
    model, _, _ = trained
    int8_model = int8_models["int8"]
    assert len(int8_layers(int8_model)) == len(int8_dense_layers(int8_model)) + 1
    assert all(v.dtype == "float32" for v in model.weights)  # the float model is untouched


def test_ctranslate2_int8_takes_the_embedding_as_it_is(trained, int8_models):
    required("ctranslate2")
    from keras_transformer.export.ctranslate2 import optimized_spec

    _, tokenizer, _ = trained
    int8_model = int8_models["int8"]
    spec = optimized_spec(int8_model, tokenizer, "int8")
    embedding = int8_model.target_embedding
    kernel = keras.ops.convert_to_numpy(embedding.projection_kernel).T
    scale = keras.ops.convert_to_numpy(embedding.projection_scale)
    variables = spec.variables()

    def array(value):
        while isinstance(value, str):  # the engine's optimize step aliases equal arrays by name
            value = variables[value]
        return np.asarray(value.numpy() if hasattr(value, "numpy") else value)

    for table in (spec.encoder.embeddings[0], spec.decoder.embeddings, spec.decoder.projection):
        np.testing.assert_array_equal(array(table.weight), kernel)
        np.testing.assert_array_equal(array(table.weight_scale), scale)


@pytest.mark.parametrize("variant", ["plain", "xla"])
def test_bfloat16_export_op_check_and_in_process_equality(variant, trained, bfloat16_exports, translations):
    export_dir = bfloat16_exports[variant]  # exported with check_ops=True: the bfloat16 check passed
    found = check_bfloat16_export(export_dir)
    assert found["bfloat16_products"] > 0
    info = json.loads(Path(export_dir, "assets.extra", "keras_transformer_export.json").read_text())
    assert info["quantization"] == "bfloat16"
    _, _, test = trained
    sources = [en for en, _ in test[:16]]  # one padded shape for the XLA variant
    signature = tf.saved_model.load(export_dir).signatures["serving_default"]
    served = [t.decode("utf-8") for t in signature(text=tf.constant(sources))["translations"].numpy()]
    same = sum(a == b for a, b in zip(served, translations["bfloat16"][:16]))
    # XLA may fuse and round bfloat16 intermediates differently from the op-by-op graph.
    assert same >= 14, [(a, b) for a, b in zip(served, translations["bfloat16"]) if a != b]


def test_bfloat16_bleu_stays_close_to_float32(trained, translations):
    _, _, test = trained
    references = [[de for _, de in test]]
    bleu = {name: sacrebleu.corpus_bleu(outputs, references).score for name, outputs in translations.items()}
    agreement = np.mean([a == b for a, b in zip(translations["float32"], translations["bfloat16"])])
    print(f"BLEU float32 {bleu['float32']:.2f}, bfloat16 {bleu['bfloat16']:.2f}; identical {agreement:.1%}")
    assert bleu["float32"] > 10, bleu  # the model learned something: the distance means something
    assert abs(bleu["bfloat16"] - bleu["float32"]) <= 1.0, bleu
    assert agreement >= 0.8, agreement


class _Product(tf.Module):
    def __init__(self, dtype, product_dtype, einsum=False):
        super().__init__()
        self.kernel = tf.Variable(tf.ones([4, 4], dtype))
        self.product_dtype = product_dtype
        self.einsum = einsum

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def __call__(self, x):
        kernel = tf.cast(self.kernel, self.product_dtype)
        x = tf.cast(x, self.product_dtype)
        # An einsum: the form of the tied output projection (SharedEmbedding.logits).
        product = tf.einsum("bd,vd->bv", x, kernel) if self.einsum else tf.matmul(x, kernel)
        return tf.cast(product, tf.float32)


@pytest.mark.parametrize("dtype, product_dtype, einsum, message", [
    (tf.float32, tf.bfloat16, False, "float variables not in bfloat16"),
    (tf.bfloat16, tf.float32, False, "matrix products outside bfloat16"),
    (tf.bfloat16, tf.float32, True, "matrix products outside bfloat16"),
])
def test_bfloat16_check_rejects_what_is_not(dtype, product_dtype, einsum, message, tmp_path):
    tf.saved_model.save(_Product(dtype, product_dtype, einsum), str(tmp_path))
    with pytest.raises(ValueError, match=message):
        check_bfloat16_export(tmp_path)


def test_int8_check_rejects_a_float_embedding(tmp_path):
    module = _Product(tf.float32, tf.float32)
    module.int8_kernel = tf.Variable(tf.ones([4, 4], tf.int8))
    tf.saved_model.save(module, str(tmp_path))
    with pytest.raises(ValueError, match=r"float matrices left beside the int8 kernels: \[\(4, 4\)\]"):
        check_int8_export(tmp_path, "int8_weights")


def test_bfloat16_is_for_the_saved_model(trained_run, bfloat16_model, tmp_path):
    required("ctranslate2")
    from keras_transformer.export.ctranslate2 import export_ctranslate2

    _, _, tokenizer, _ = trained_run
    with pytest.raises(ValueError, match="bfloat16 weights: export the float32 model"):
        export_ctranslate2(bfloat16_model, tokenizer, tmp_path / "ct2", quantization="int8")
    with pytest.raises(SystemExit, match="--quantize bfloat16 is for --format saved_model"):
        cli.main(["export", str(trained_run[0]), "--format", "ctranslate2", "--quantize", "bfloat16",
                  "--output", str(tmp_path / "ct2-cli")])
