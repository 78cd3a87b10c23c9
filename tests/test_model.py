import inspect

import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt
import keras_transformer.layers as kt_layers
from conftest import to_numpy

VOCAB = 31


def small_model(**overrides):
    config = dict(d_model=16, num_heads=4, d_ff=32, num_encoder_layers=2, num_decoder_layers=2, dropout=0.1)
    config.update(overrides)
    model = kt.Transformer(vocabulary_size=VOCAB, **config)
    model.build()
    return model


def batch(rng, batch_size=3, source_length=6, target_length=5):
    source = rng.integers(1, VOCAB, size=(batch_size, source_length))
    target = rng.integers(1, VOCAB, size=(batch_size, target_length))
    source[1, 4:] = 0
    target[2, 3:] = 0
    return {"source": source, "target": target}


def test_logits_shape_and_dtype(rng):
    model = small_model()
    logits = model(batch(rng))
    assert tuple(logits.shape) == (3, 5, VOCAB)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


def test_source_padding_changes_no_logit(rng):
    model = small_model()
    inputs = batch(rng)
    padded = dict(inputs, source=np.pad(inputs["source"], ((0, 0), (0, 4))))
    np.testing.assert_allclose(to_numpy(model(inputs)), to_numpy(model(padded)), atol=1e-5)


def test_future_target_tokens_change_no_earlier_logit(rng):
    model = small_model()
    inputs = batch(rng)
    changed = {k: v.copy() for k, v in inputs.items()}
    changed["target"][:, 3] = (changed["target"][:, 3] % (VOCAB - 1)) + 1
    before, after = to_numpy(model(inputs)), to_numpy(model(changed))
    np.testing.assert_allclose(before[:, :3], after[:, :3], atol=1e-5)
    assert not np.allclose(before[:, 3:], after[:, 3:])


def test_dropout_is_active_only_in_training(rng):
    model = small_model(dropout=0.3)
    inputs = batch(rng)
    eval_a, eval_b = to_numpy(model(inputs)), to_numpy(model(inputs, training=False))
    np.testing.assert_allclose(eval_a, eval_b)
    assert not np.allclose(eval_a, to_numpy(model(inputs, training=True)))


def test_encode_decode_equal_call(rng):
    model = small_model()
    inputs = batch(rng)
    encoded = model.encode(inputs["source"])
    logits = model.decode(inputs["target"], encoded, inputs["source"])
    np.testing.assert_allclose(to_numpy(logits), to_numpy(model(inputs)), atol=1e-6)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph-layout", "xla-layout"])
@pytest.mark.parametrize("norm_first,key_dim", [(False, None), (True, None), (False, 2)],
                         ids=["post_ln", "pre_ln", "key_dim_2"])
def test_incremental_decoder_equals_full_decoding(norm_first, key_dim, jit_compile, rng):
    model = small_model(norm_first=norm_first, key_dim=key_dim)
    inputs = batch(rng)
    inputs["target"][2, 3:] = 7  # decoding never sees padding
    source, target = inputs["source"], inputs["target"]
    full = to_numpy(model.decode(target, model.encode(source), source))
    decoder = model.incremental_decoder(source, buffer_length=target.shape[1], jit_compile=jit_compile)
    state, steps = decoder.initial_state, []
    for t in range(target.shape[1]):
        logits, state = decoder.step(state, target[:, t], t)
        steps.append(to_numpy(logits))
    np.testing.assert_allclose(np.stack(steps, axis=1), full, atol=1e-4)


@pytest.mark.parametrize("key_dim", [None, 6])
def test_incremental_decoder_reorders_beams(key_dim, rng):
    """Two beams per sentence that swap hypotheses after the first step: each
    row's logits must follow its new hypothesis (its parent's keys and values)."""
    model = small_model(key_dim=key_dim)
    inputs = batch(rng)
    source, target = inputs["source"], inputs["target"][:, :3]
    target[2, :] = [2, 5, 6]  # no padding inside the prefixes
    other = target.copy()
    other[:, 1] = (target[:, 1] + 1) % 7 + 3  # the second beam's own first token
    decoder = model.incremental_decoder(source, beam_size=2, buffer_length=3)
    rows = np.arange(3)
    state = decoder.initial_state
    _, state = decoder.step(state, np.repeat(target[:, 0], 2), 0)
    # Beam 0 writes target's token, beam 1 other's; then both continue beam 1.
    step_tokens = np.stack([target[:, 1], other[:, 1]], axis=1).reshape(-1)
    _, state = decoder.step(state, step_tokens, 1)
    state = decoder.reorder(state, np.repeat(rows * 2 + 1, 2))
    logits, _ = decoder.step(state, np.repeat(other[:, 2], 2), 2)
    full = to_numpy(model.decode(other, model.encode(source), source))[:, 2]
    np.testing.assert_allclose(to_numpy(logits)[0::2], full, atol=1e-4)
    np.testing.assert_allclose(to_numpy(logits)[1::2], full, atol=1e-4)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph-layout", "xla-layout"])
def test_grown_decoder_state_keeps_every_entry_in_place(jit_compile, rng):
    """Two beams per sentence decode 7 positions from a state with room for 1,
    grown to 2, 3 and 7 on the way (`grow`, as the searches' phases do), beam
    1 taking over beam 0's hypothesis after steps 1 and 4: at every step,
    every row's logits must equal full decoding of its hypothesis. A grow
    that lost, moved or misaligned cache entries or slot history would
    change them."""
    model = small_model()
    length = 7
    source = batch(rng)["source"]
    fed = rng.integers(3, VOCAB, size=(3, 2, length))  # (sentence, beam, position)
    fed[:, :, 0] = 2
    decoder = model.incremental_decoder(source, beam_size=2, buffer_length=length, jit_compile=jit_compile)
    encoded = ops.repeat(model.encode(source), 2, axis=0)
    sources = np.repeat(source, 2, axis=0)
    state = decoder.empty_state(1)
    assert decoder.capacity_of(state) == 1
    hypotheses = np.zeros((3, 2, 0), "int64")  # each row's tokens so far
    for step in range(length):
        capacity = {1: 2, 2: 3, 3: length}.get(step)
        if capacity is not None:
            state = decoder.grow(state, capacity)
            assert decoder.capacity_of(state) == capacity
        hypotheses = np.concatenate([hypotheses, fed[:, :, step : step + 1]], axis=2)
        logits, state = decoder.step(state, fed[:, :, step].reshape(-1), step)
        full = to_numpy(model.decode(hypotheses.reshape(6, step + 1), encoded, sources))[:, step]
        np.testing.assert_allclose(to_numpy(logits), full, atol=1e-4, err_msg=f"step {step}")
        if step in (1, 4):  # beam 1 continues beam 0's hypothesis
            state = decoder.reorder(state, np.repeat(np.arange(3) * 2, 2))
            hypotheses[:, 1] = hypotheses[:, 0]


def test_cross_attention_weights_are_returned(rng):
    model = small_model()
    inputs = batch(rng)
    encoded = model.encode(inputs["source"])
    logits, weights = model.decode(inputs["target"], encoded, inputs["source"], return_attention_weights=True)
    weights = to_numpy(weights)
    assert weights.shape == (2, 3, 4, 5, 6)  # layers, batch, heads, target, source
    assert np.all(weights[:, 1, :, :, 4:] == 0)  # padded source positions get no weight
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    "preset,expected,paper", [("base", 63.1e6, 65e6), ("big", 214.2e6, 213e6)]
)
def test_paper_presets_parameter_counts(preset, expected, paper):
    model = kt.Transformer.from_preset(preset, vocabulary_size=37000)
    assert abs(model.count_params() - paper) / paper < 0.05
    assert abs(model.count_params() - expected) / expected < 0.002
    assert model.dropout == {"base": 0.1, "big": 0.3}[preset]


def test_preset_overrides_and_unknown_preset():
    model = kt.Transformer.from_preset("tiny", vocabulary_size=50, num_encoder_layers=1)
    assert (model.d_model, model.num_heads, model.d_ff, model.num_decoder_layers) == (256, 4, 1024, 3)
    assert model.num_encoder_layers == 1
    with pytest.raises(ValueError, match="huge"):
        kt.Transformer.from_preset("huge", vocabulary_size=50)


def test_bad_inputs_are_named(rng):
    model = small_model()
    with pytest.raises(ValueError, match="'source' and 'target'"):
        model({"src": np.ones((1, 2), "int32"), "target": np.ones((1, 2), "int32")})
    with pytest.raises(ValueError, match="positional_encoding"):
        kt.Transformer(vocabulary_size=10, positional_encoding="rotary")


def test_separate_source_vocabulary(rng):
    model = small_model(source_vocabulary_size=50)
    inputs = {"source": rng.integers(1, 50, size=(2, 4)), "target": rng.integers(1, VOCAB, size=(2, 3))}
    assert tuple(model(inputs).shape) == (2, 3, VOCAB)
    assert model.source_embedding is not model.target_embedding


@pytest.mark.parametrize(
    "overrides",
    [{}, {"norm_first": True}, {"positional_encoding": "learned", "max_length": 16}, {"key_dim": 2}],
    ids=["post_ln", "pre_ln", "learned_positions", "key_dim"],
)
def test_keras_file_round_trip(overrides, rng, tmp_path):
    model = small_model(**overrides)
    inputs = batch(rng)
    expected = to_numpy(model(inputs))
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)  # safe_mode stays on
    assert isinstance(restored, kt.Transformer)
    assert restored.get_config() == model.get_config()
    np.testing.assert_allclose(to_numpy(restored(inputs)), expected, atol=1e-6)
    if overrides.get("key_dim"):
        attention = restored.decoder.stacked_layers[0].cross_attention
        assert (attention.key_depth, attention.depth) == (overrides["key_dim"], 16 // 4)


def test_config_round_trip_gives_identical_outputs(rng):
    model = small_model()
    clone = kt.Transformer.from_config(model.get_config())
    clone.build()
    clone.set_weights(model.get_weights())
    inputs = batch(rng)
    np.testing.assert_allclose(to_numpy(clone(inputs)), to_numpy(model(inputs)), atol=1e-6)


PUBLIC_LAYERS = [
    obj for _, obj in inspect.getmembers(kt_layers, inspect.isclass) if issubclass(obj, keras.layers.Layer)
]


def test_every_public_layer_is_registered():
    assert len(PUBLIC_LAYERS) >= 10
    for cls in PUBLIC_LAYERS + [kt.Transformer]:
        name = keras.saving.get_registered_name(cls)
        assert name == f"keras_transformer>{cls.__name__}"
        assert keras.saving.get_registered_object(name) is cls


def _layer_cases(rng):
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    memory = rng.normal(size=(2, 3, 8)).astype("float32")
    mask = np.ones((2, 1, 3), bool)
    stack = dict(d_model=8, num_heads=2, d_ff=12, dropout=0.1)
    return [
        (kt.ScaledDotProductAttention(dropout=0.1), (x[:, None], x[:, None], x[:, None]), {}),
        (kt.MultiHeadAttention(8, 2, dropout=0.1), (x, memory), {"attention_mask": mask}),
        (kt.SinusoidalPositionalEncoding(), (x,), {}),
        (kt.LearnedPositionalEmbedding(10, 8), (x,), {}),
        (kt.SharedEmbedding(12, 8), (np.array([[1, 2, 3]]),), {}),
        (kt.PositionwiseFeedForward(8, 12, dropout=0.2), (x,), {}),
        (kt.EncoderLayer(norm_first=True, **stack), (x,), {}),
        (kt.DecoderLayer(**stack), (x, memory), {"cross_attention_mask": mask}),
        (kt.Encoder(2, **stack), (x,), {}),
        (kt.Decoder(2, norm_first=True, **stack), (x, memory), {}),
    ]


def test_every_layer_config_round_trip(rng):
    cases = _layer_cases(rng)
    assert {type(layer) for layer, _, _ in cases} == set(PUBLIC_LAYERS)
    for layer, args, kwargs in cases:
        expected = to_numpy(layer(*args, **kwargs))
        config = keras.saving.serialize_keras_object(layer)
        clone = keras.saving.deserialize_keras_object(config)
        assert type(clone) is type(layer)
        assert clone.get_config() == layer.get_config()
        clone(*args, **kwargs)
        clone.set_weights(layer.get_weights())
        np.testing.assert_allclose(to_numpy(clone(*args, **kwargs)), expected, atol=1e-6, err_msg=type(layer).__name__)
