"""keras_transformer.hub on every backend: the KerasHub backbone holds the
Transformer exactly (same weights, same logits, both ways), the task's
generate() is our searches (beam with the length penalty, greedy, sampling)
on those weights, fit() trains it, and LoRA trains only its adapters, whose
merged model gives the adapted outputs. Texts, tokenizer and presets:
tests/tf/test_hub_presets.py."""

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.decoding import Translator  # noqa: E402
from keras_transformer.hub import TransformerBackbone, TransformerSeq2SeqLM  # noqa: E402

VOCABULARY = 40
SOURCES = np.array([[5, 6, 7, 8, 3, 0], [9, 10, 3, 0, 0, 0], [11, 12, 13, 14, 15, 3]], "int32")
TARGETS = np.array([[2, 6, 5, 0], [2, 10, 9, 12], [2, 15, 0, 0]], "int32")


def tiny_transformer(seed=0):
    keras.utils.set_random_seed(seed)
    model = Transformer(VOCABULARY, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                        num_decoder_layers=1, dropout=0.0)
    model.build()
    return model


@pytest.fixture(scope="module")
def model():
    return tiny_transformer()


def within(variable):
    """A variable's path inside its model (the model's own name depends on how many were made before)."""
    return variable.path.split("/", 1)[1]


def logits_of(network, sources=SOURCES, targets=TARGETS):
    if isinstance(network, Transformer):
        outputs = network({"source": sources, "target": targets})
    else:
        outputs = network({"encoder_token_ids": sources, "decoder_token_ids": targets})
    return keras.ops.convert_to_numpy(outputs)


def test_backbone_holds_the_transformer_exactly_both_ways(model):
    backbone = TransformerBackbone.from_transformer(model)
    assert isinstance(backbone, keras_hub.models.Backbone)
    assert backbone.count_params() == model.count_params()
    assert backbone.token_embedding is backbone.transformer.target_embedding
    np.testing.assert_array_equal(logits_of(backbone), logits_of(model))
    back = backbone.to_transformer()
    assert back is not backbone.transformer
    for ours, theirs in zip(back.weights, model.weights):
        assert within(ours) == within(theirs)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs))
    np.testing.assert_array_equal(logits_of(back), logits_of(model))
    # Constructor-only config: the Transformer's own arguments.
    config = backbone.get_config()
    assert {key: config[key] for key in ("vocabulary_size", "d_model", "num_heads", "d_ff")} == \
        {"vocabulary_size": VOCABULARY, "d_model": 16, "num_heads": 2, "d_ff": 32}
    again = TransformerBackbone.from_config(config)
    assert type(again) is TransformerBackbone and again.get_config() == config


@pytest.fixture(scope="module")
def task(model):
    return TransformerSeq2SeqLM(TransformerBackbone.from_transformer(model),
                                decoding={"beam_size": 3, "alpha": 0.6, "max_extra_length": 4})


@pytest.mark.usefixtures("one_phase_search")  # buffers of at most 16 positions (conftest)
def test_generate_runs_our_searches_on_the_backbone_weights(task):
    """Ids in, ids out, as `Translator` gives them on the backbone's
    Transformer with the task's decoding settings or the options given:
    beam, greedy, sampling with a seed, an output cap. (The backbone holds
    the original model exactly: the test above. Searching the same model
    object reuses its compiled searches.)"""
    rows = [[int(i) for i in row if i] for row in SOURCES]

    def reference(**options):
        return Translator(task.backbone.transformer, None, **options).translate_ids(rows)[0]

    beam = task.generate({"encoder_token_ids": SOURCES})
    assert beam == reference(beam_size=3, alpha=0.6, max_extra_length=4)
    assert task.generate(SOURCES, search="greedy") == reference(beam_size=1, max_extra_length=4)
    sampled = task.generate(SOURCES, search="sampling", seed=7, top_k=5)
    assert sampled == reference(search="sampling", seed=7, top_k=5, max_extra_length=4)
    assert sampled != task.generate(SOURCES, search="sampling", seed=8, top_k=5)  # the seed reaches the search
    with pytest.raises(ValueError, match="texts need a preprocessor"):
        task.generate(["a text"])


def test_fit_lowers_the_loss_and_lora_trains_only_its_adapters():
    keras.utils.set_random_seed(1)
    task = TransformerSeq2SeqLM(TransformerBackbone.from_transformer(tiny_transformer(1)))
    inputs = {"encoder_token_ids": SOURCES, "decoder_token_ids": TARGETS}
    labels = np.concatenate([TARGETS[:, 1:], np.full((3, 1), 3, "int32")], axis=1)
    weights = (labels != 0).astype("float32")
    task.compile(optimizer=keras.optimizers.Adam(0.01), jit_compile=False)
    history = task.fit(inputs, labels, sample_weight=weights, batch_size=3, epochs=4, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0], losses

    backbone = task.backbone
    before = logits_of(backbone)
    backbone.enable_lora(2)
    # KerasHub's default targets: the "query" and "value" projections of every
    # attention (encoder self, decoder self and cross: 3 x 2 Dense layers),
    # each with its two factors; their biases stay trainable (KerasHub's rule).
    adapted = [layer for layer in backbone._flatten_layers() if getattr(layer, "lora_enabled", False)]
    assert sorted(layer.name for layer in adapted) == ["query"] * 3 + ["value"] * 3
    expected = {id(v) for layer in adapted for v in (layer.lora_kernel_a, layer.lora_kernel_b, layer.bias)}
    assert {id(v) for v in task.trainable_weights} == expected and len(expected) == 18
    frozen = [keras.ops.convert_to_numpy(v) for v in backbone.transformer.target_embedding.weights]
    task.compile(optimizer=keras.optimizers.Adam(0.05), jit_compile=False)
    task.fit(inputs, labels, sample_weight=weights, batch_size=3, epochs=3, verbose=0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(backbone.transformer.target_embedding.weights[0]),
                                  frozen[0])
    lora_logits = logits_of(backbone)
    assert np.abs(lora_logits - before).max() > 1e-3  # the adapters changed the model
    merged = backbone.to_transformer()
    assert not any(getattr(layer, "lora_enabled", False) for layer in merged._flatten_layers())
    np.testing.assert_allclose(logits_of(merged), lora_logits, atol=1e-5)
    # generate() decodes the adapted model (the LoRA layers called, not fused).
    rows = [[int(i) for i in row if i] for row in SOURCES]
    assert task.generate(SOURCES, search="greedy", max_extra_length=4) == \
        Translator(merged, None, beam_size=1, max_extra_length=4).translate_ids(rows)[0]


def test_a_preset_loads_back_through_keras_hub_and_translates_as_the_model(tmp_path):
    """Texts in, texts out on every backend: a task saved with
    `save_to_preset` and loaded by KerasHub's own entry point holds the
    original weights exactly (the model built on loading starts from other
    random ones) and, through the preset's tokenizer, translates as
    `Translator` with the original tokenizer (beam). The reference runs on
    the loaded model object, whose weights are the original's, so the
    search is traced once."""
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.datasets.synthetic_en_de import make_splits

    pairs = make_splits(0, 24, seed=1)[1]
    tokenizer = SubwordTokenizer.train(pairs, 120, hard_vocab_limit=False, seed=0, num_threads=1)
    keras.utils.set_random_seed(2)
    original = Transformer(tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                           num_decoder_layers=1, dropout=0.0)
    original.build()
    decoding = {"beam_size": 3, "alpha": 0.6, "max_extra_length": 5}
    TransformerSeq2SeqLM.from_transformer(original, tokenizer, decoding=decoding).save_to_preset(
        str(tmp_path / "preset"))
    keras.utils.set_random_seed(3)
    task = keras_hub.models.Seq2SeqLM.from_preset(str(tmp_path / "preset"))
    assert isinstance(task, TransformerSeq2SeqLM)
    loaded = task.backbone.transformer
    assert [within(v) for v in loaded.weights] == [within(v) for v in original.weights]
    for ours, theirs in zip(loaded.weights, original.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs))
    sources = [source for source, _ in pairs[:4]]
    assert task.generate(sources) == Translator(loaded, tokenizer, beam_size=3, alpha=0.6, max_extra_length=5)(sources)
