"""The model options imported Marian / OPUS-MT models need, on every backend:
an output bias (Marian's `final_logits_bias`) in the model's logits and in
the incremental decoders' steps (cached and recomputing), which the searches
follow; the concatenated sinusoid layout, checked against Transformers'
`MarianSinusoidalPositionalEmbedding`; the feed-forward activations, checked
against torch's; the `.keras` round trip and the configuration keys.

Tiny models, searches run eagerly (`compile=False`): nothing here traces.
"""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from conftest import to_numpy
from keras_transformer import config as config_lib
from keras_transformer.decoding import beam_search, greedy_search, score_translations
from keras_transformer.layers.embeddings import SINUSOID_LAYOUTS
from required_imports import required

VOCAB = 23
BOS, EOS = 2, 3
SOURCE = np.array([[5, 9, 14, 7, 3], [11, 3, 0, 0, 0], [20, 6, 3, 0, 0]], "int32")
TARGET = np.array([[2, 8, 12, 4], [2, 15, 0, 0], [2, 9, 10, 0]], "int32")


def small_model(**overrides):
    config = dict(vocabulary_size=VOCAB, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                  num_decoder_layers=1, dropout=0.0)
    config.update(overrides)
    model = kt.Transformer(**config)
    model.build()
    return model


@pytest.fixture(scope="module")
def models():
    """(plain, biased, bias): the same weights, the second with a random output bias."""
    keras.utils.set_random_seed(5)
    plain = small_model()
    biased = small_model(output_bias=True)
    others = [v for v in biased.weights if v is not biased.output_bias]
    assert len(others) == len(plain.weights) == len(biased.weights) - 1
    for mine, theirs in zip(others, plain.weights, strict=True):
        mine.assign(theirs)
    bias = np.random.default_rng(0).normal(scale=2.0, size=VOCAB).astype("float32")
    biased.output_bias.assign(bias)
    return plain, biased, bias


def test_output_bias_is_a_zeros_float32_vector_and_off_by_default():
    model = small_model(output_bias=True)
    assert tuple(model.output_bias.shape) == (VOCAB,) and model.output_bias.dtype == "float32"
    assert not to_numpy(model.output_bias).any()
    assert model.get_config()["output_bias"] is True
    plain = small_model()
    assert plain.output_bias is None and plain.get_config()["output_bias"] is False
    assert len(model.weights) == len(plain.weights) + 1


def test_logits_with_the_bias_are_the_logits_without_it_plus_the_bias(models):
    plain, biased, bias = models
    inputs = {"source": SOURCE, "target": TARGET}
    np.testing.assert_allclose(to_numpy(biased(inputs)), to_numpy(plain(inputs)) + bias, atol=1e-5)
    # Shortlist rows: the bias of the listed ids, in their order.
    hidden = np.random.default_rng(1).normal(size=(3, 16)).astype("float32")
    ids = np.array([9, 4, 17], "int32")
    np.testing.assert_allclose(to_numpy(biased.target_embedding.logits(hidden, ids)),
                               to_numpy(plain.target_embedding.logits(hidden, ids)) + bias[ids], atol=1e-5)


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "recomputing"])
def test_one_incremental_step_adds_the_bias(use_cache, models):
    plain, biased, bias = models
    steps = []
    for model in (plain, biased):
        decoder = model.incremental_decoder(SOURCE, beam_size=1, buffer_length=4, use_cache=use_cache)
        logits, _ = decoder.step(decoder.initial_state, np.full((3,), BOS, "int32"), 0)
        steps.append(to_numpy(logits))
    np.testing.assert_allclose(steps[1], steps[0] + bias, atol=1e-5)
    # The step is the full forward pass's first position.
    np.testing.assert_allclose(steps[1], to_numpy(biased({"source": SOURCE, "target": TARGET}))[:, 0], atol=1e-5)


def test_scores_follow_the_bias(models):
    plain, biased, bias = models
    targets = TARGET[:, 1:]
    mine = to_numpy(score_translations(biased, SOURCE, targets, alpha=0.0, compile=False)["log_probs"])
    # Reference: the plain model's logits plus the bias, normalised here.
    logits = to_numpy(plain({"source": SOURCE, "target": TARGET})).astype("float64") + bias
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    following = np.concatenate([targets, np.zeros((3, 1), "int32")], axis=1)
    following[np.arange(3), (targets > 0).sum(1)] = EOS
    expected = [sum(log_probs[row, col, token] for col, token in enumerate(following[row]) if token)
                for row in range(3)]
    np.testing.assert_allclose(mine, expected, atol=1e-4)


def test_a_large_bias_on_one_token_makes_the_searches_pick_it(models):
    plain, biased, _ = models
    favourite = 7
    bias = np.zeros(VOCAB, "float32")
    bias[favourite] = 50.0
    pushed = small_model(output_bias=True)
    pushed.set_weights([to_numpy(v) for v in biased.weights])
    pushed.output_bias.assign(bias)
    # Beam: hypotheses cut at the limit compete ("finish"), else an early EOS (log P about -50) would win.
    for search, options in ((greedy_search, {}), (beam_search, {"beam_size": 3, "limit_rule": "finish"})):
        before = to_numpy(search(plain, SOURCE, max_extra_length=2, compile=False, **options)["ids"])
        after = to_numpy(search(pushed, SOURCE, max_extra_length=2, compile=False, **options)["ids"])
        assert not (before[:, 0] == favourite).all()  # the bias, not the model, picks it
        assert (after[:, 0] == favourite).all(), (search.__name__, after)


def marian_table(length, d_model, start):
    """Transformers' MarianMT position table (torch), rows start .. start + length - 1."""
    required("torch")
    required("transformers")
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    layer = MarianSinusoidalPositionalEmbedding(start + length, d_model)
    layer.weight.data.copy_(layer.create_weight())  # what Transformers' _init_weights puts there
    return layer((1, length), past_key_values_length=start).detach().numpy()


@pytest.mark.parametrize("length,d_model,start,atol", [(12, 16, 0, 1e-6), (4, 7, 3, 1e-6), (300, 32, 0, 1e-4)],
                         ids=["short", "odd-width", "long"])
def test_concatenated_layout_equals_transformers_marian_table(length, d_model, start, atol):
    layer = kt.SinusoidalPositionalEncoding(layout="concatenated")
    mine = to_numpy(layer(np.zeros((2, length, d_model), "float32"), start_index=start))
    # Our table is computed in float32, Transformers' in float64: angles up to
    # 300 differ by their float32 rounding, a few 1e-5, as in the paper's layout.
    np.testing.assert_allclose(mine[1], marian_table(length, d_model, start), atol=atol)


def test_concatenated_layout_is_the_interleaved_one_with_columns_moved():
    inputs = np.zeros((1, 9, 10), "float32")
    interleaved = to_numpy(kt.SinusoidalPositionalEncoding()(inputs))[0]
    concatenated = to_numpy(kt.SinusoidalPositionalEncoding(layout="concatenated")(inputs))[0]
    np.testing.assert_allclose(concatenated, np.concatenate([interleaved[:, 0::2], interleaved[:, 1::2]], 1),
                               atol=1e-7)


def test_activations_are_torchs():
    torch = required("torch")
    x = np.linspace(-4, 4, 33, dtype="float32").reshape(1, 3, 11)
    expected = {"relu": torch.relu, "gelu": torch.nn.functional.gelu,  # exact erf form, not tanh
                "swish": torch.nn.functional.silu, "silu": torch.nn.functional.silu}
    for name, function in expected.items():
        layer = kt.PositionwiseFeedForward(d_model=11, d_ff=11, activation=name)
        layer.build(x.shape)
        layer.inner.kernel.assign(np.eye(11, dtype="float32"))
        layer.inner.bias.assign(np.zeros(11, "float32"))
        layer.outer.kernel.assign(np.eye(11, dtype="float32"))
        np.testing.assert_allclose(to_numpy(layer(x)), function(torch.from_numpy(x)).numpy(), atol=1e-6,
                                   err_msg=name)


def test_keras_file_round_trip_keeps_bias_and_layout(tmp_path):
    keras.utils.set_random_seed(2)
    model = small_model(output_bias=True, sinusoid_layout="concatenated", activation="swish",
                        layer_norm_epsilon=1e-5)
    model.output_bias.assign(np.random.default_rng(3).normal(size=VOCAB).astype("float32"))
    inputs = {"source": SOURCE, "target": TARGET}
    expected = to_numpy(model(inputs))
    model.save(tmp_path / "model.keras")
    restored = keras.saving.load_model(tmp_path / "model.keras")
    assert restored.get_config() == model.get_config()
    assert restored.position_encoding.layout == "concatenated"
    np.testing.assert_array_equal(to_numpy(restored.output_bias), to_numpy(model.output_bias))
    np.testing.assert_allclose(to_numpy(restored(inputs)), expected, atol=1e-6)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="sinusoid_layout.*'halves'"):
        kt.Transformer(vocabulary_size=VOCAB, sinusoid_layout="halves")
    with pytest.raises(ValueError, match="layout.*'halves'"):
        kt.SinusoidalPositionalEncoding(layout="halves")
    with pytest.raises(ValueError, match="output_bias"):
        kt.Transformer(vocabulary_size=VOCAB, output_bias="yes")


def test_configuration_keys_reach_the_model():
    assert config_lib.SCHEMA["model"]["sinusoid_layout"][1] == SINUSOID_LAYOUTS
    config = config_lib.resolve(assignments=[
        "model.d_model=16", "model.num_heads=2", "model.d_ff=32", "model.num_encoder_layers=1",
        "model.num_decoder_layers=1", "model.activation=swish", "model.layer_norm_epsilon=1e-5",
        "model.output_bias=true", "model.sinusoid_layout=concatenated",
    ])
    model = kt.Transformer.from_preset(config["model"]["preset"], vocabulary_size=VOCAB,
                                       **config_lib.model_overrides(config["model"]))
    assert model.output_bias is not None and model.position_encoding.layout == "concatenated"
    layer = model.encoder.stacked_layers[0]
    assert layer.feed_forward.activation is keras.activations.silu
    assert layer.feed_forward_norm.epsilon == 1e-5
    defaults = config_lib.model_overrides(config_lib.defaults()["model"])
    assert (defaults["activation"], defaults["layer_norm_epsilon"], defaults["output_bias"],
            defaults["sinusoid_layout"]) == ("relu", 1e-6, False, "interleaved")
    with pytest.raises(config_lib.ConfigError, match="model.activation"):
        config_lib.resolve(assignments=["model.activation=tanh"])
