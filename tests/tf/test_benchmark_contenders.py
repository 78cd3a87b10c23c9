"""The benchmarks' like-for-like KerasHub contender is our model's size, exactly, and its search
applies ours' length penalty and length cap."""

import sys
from pathlib import Path

import numpy as np

from required_imports import required  # noqa: E402

required("keras_hub")  # under CI=true a failed import fails the run

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import keras_transformer as kt  # noqa: E402
from benchmarks import _contender_keras_hub as hub  # noqa: E402

SMALL = dict(vocab=300, d_model=32, layers=2, heads=2, d_ff=64, dropout=0.1)


def ours(norm_first):
    return kt.Transformer.from_preset(
        "tiny", vocabulary_size=SMALL["vocab"], d_model=SMALL["d_model"], num_heads=SMALL["heads"],
        d_ff=SMALL["d_ff"], num_encoder_layers=SMALL["layers"], num_decoder_layers=SMALL["layers"],
        dropout=SMALL["dropout"], norm_first=norm_first,
    )


def test_tied_keras_hub_model_has_our_parameter_count_one_embedding_and_no_attention_dropout():
    for norm_first in (False, True):
        theirs = hub.KerasHub().build(SMALL, norm_first=norm_first)
        assert theirs.count_params() == ours(norm_first).count_params(), norm_first
    # One (vocabulary, d_model) matrix, serving source, target and output (tied, no output bias).
    tables = [w for w in theirs.weights if tuple(w.shape) == (SMALL["vocab"], SMALL["d_model"])]
    assert len(tables) == 1
    assert not [w for w in theirs.weights if tuple(w.shape) == (SMALL["vocab"],)]
    # Dropout on sub-layer outputs as ours; none on attention weights (KerasHub's one rate set both).
    attention = [a for layer in theirs.encoders + theirs.decoders for a in hub.attention_layers(layer)]
    assert len(attention) == 3 * SMALL["layers"]
    assert all(a._dropout == 0.0 and a._dropout_layer.rate == 0.0 for a in attention)
    assert theirs.encoders[0]._self_attention_dropout.rate == SMALL["dropout"]
    # It runs: logits over the vocabulary for every target position.
    source = np.array([[5, 6, 7, 3, 0]], "int32")
    target = np.array([[2, 8, 9, 0]], "int32")
    logits = theirs({"source": source, "target": target})
    assert tuple(logits.shape) == (1, 4, SMALL["vocab"])


def test_next_token_rule_freezes_finished_beams_and_forces_eos_at_the_cap():
    logits = np.log(np.array([[0.1, 0.1, 0.1, 0.2, 0.5]] * 4, "float32"))
    # Rows: live, finished (last EOS), finished (last pad), live at its cap (4 generated, limit 5).
    last = np.array([7, 3, 0, 7])
    generated = np.array([1, 2, 3, 4])
    limits = np.array([5, 5, 5, 5])
    rule = np.asarray(hub.next_token_rule(logits, last, generated, limits))
    log_probs = rule - np.log(np.exp(rule).sum(-1, keepdims=True))  # BeamSampler's log-softmax
    # Live: pad (0) and BOS (2) barred, the others renormalised over 0.1 + 0.2 + 0.5.
    np.testing.assert_allclose(np.exp(log_probs[0]), [0, 0.125, 0, 0.25, 0.625], atol=1e-6)
    for row in (1, 2):  # finished: pad with probability 1, so the beam's log P stays what it was
        np.testing.assert_allclose(log_probs[row, 0], 0.0, atol=1e-6)
        assert np.all(log_probs[row, 1:] < -1e6)
    np.testing.assert_allclose(np.exp(log_probs[3]), [0, 0, 0, 1, 0], atol=1e-6)


def test_best_by_length_penalty_ranks_as_ours():
    # One sentence, two beams (BOS 2, EOS 3, pad after): lengths with EOS 2 and 5.
    beams = np.array([[[2, 9, 3, 0, 0, 0], [2, 9, 8, 7, 6, 3]]], "int32")
    # log P -1.0 and -1.3: plain log P prefers the short one; the GNMT penalty, by hand:
    # -1.0 / (7/6)^0.6 = -0.9116, -1.3 / (10/6)^0.6 = -0.9657 -> still the short one at alpha 0.6;
    # at alpha 2: -1.0 / (7/6)^2 = -0.7347, -1.3 / (10/6)^2 = -0.468 -> the long one.
    log_probs = np.array([[-1.0, -1.3]], "float32")
    assert np.asarray(hub.best_by_length_penalty(beams, log_probs, 0.6)).tolist() == [[2, 9, 3, 0, 0, 0]]
    assert np.asarray(hub.best_by_length_penalty(beams, log_probs, 2.0)).tolist() == [[2, 9, 8, 7, 6, 3]]


def test_keras_hub_beam_search_scores_hypotheses_up_to_eos_within_the_cap():
    import keras
    import keras_hub

    keras.utils.set_random_seed(3)
    # Eight ids (pad, unk, BOS, EOS, four words): random weights end hypotheses at various steps.
    model = hub.KerasHub().build(dict(SMALL, vocab=8, layers=1))
    source = np.array([[4, 5, 6, 3], [7, 3, 0, 0]], "int32")
    extra = 3  # caps: 4 + 3 = 7 and 2 + 3 = 5 tokens, EOS included
    sampler = keras_hub.samplers.BeamSampler(num_beams=3, return_all_beams=True)
    beams, log_probs = hub.all_beams_and_log_probs(model, sampler, source, 4 + extra, extra)
    beams, log_probs = np.asarray(beams), np.asarray(log_probs)
    ended_early = 0
    for row, cap in enumerate((7, 5)):
        for beam, expected in zip(beams[row], log_probs[row]):
            tokens = beam[1:].tolist()
            length = tokens.index(3) + 1  # every hypothesis ends with EOS, at the cap at the latest
            assert length <= cap and all(t == 0 for t in tokens[length:]), (row, tokens)
            ended_early += length < cap
            # Log P recomputed without the cache or the sampler: the full model on BOS + the
            # hypothesis, softmax over the ids a live beam may produce (no pad, no BOS), EOS
            # certain at the cap; nothing counted after EOS.
            logits = np.asarray(model({"source": source[row:row + 1], "target": beam[None, :length]}))[0]
            total = 0.0
            for step, token in enumerate(tokens[:length]):
                if step + 1 == cap:
                    continue  # only EOS allowed: probability 1
                allowed = np.delete(logits[step], [0, 2])
                total += logits[step, token] - np.log(np.exp(allowed - allowed.max()).sum()) - allowed.max()
            np.testing.assert_allclose(expected, total, rtol=1e-4, atol=1e-4)
    assert ended_early  # some hypothesis finished before its cap and stayed frozen


def test_serve_profile_loops_run_on_the_incremental_decoder_api():
    """benchmarks/serve_profile.py builds its loops on `Transformer.incremental_decoder`; it raised a
    TypeError once the decoder's arguments were renamed (`buffer_length`, `jit_compile`)."""
    from benchmarks import serve_profile

    args = serve_profile.parse_args(["--preset", "tiny", "--batch-size", "1", "--steps", "2", "--beam-size", "2",
                                     "--record", ""])
    model = ours(norm_first=False)
    source = np.array([[5, 6, serve_profile.EOS]], "int32")
    for loop in (serve_profile.steps_loop, serve_profile.products_loop):
        assert np.isfinite(np.asarray(loop(model, source, args, jit_compile=False)())).all(), loop.__name__


def test_serve_profile_kernels_each_multiply_like_numpy():
    """serve_profile.py --kernels times five product kernels (float32, bfloat16, Keras' int8 Dense, oneDNN's
    u8 x s8 QuantizedMatMulWithBias with the weights a variable or a constant): each must compute x @ w,
    else the timings compare different work. The bound is int8's: per-tensor 8-bit steps on both sides."""
    import tensorflow as tf

    from benchmarks import serve_profile

    products, w = serve_profile.kernel_products(4, 32, 24)
    # oneDNN's quantized op has a kernel only where TensorFlow runs oneDNN (off by default without AVX-512).
    onednn = {name for name in products if name.startswith("oneDNN")}
    assert len(onednn) == (2 if serve_profile.tensorflow_uses_onednn() else 0), sorted(products)
    x = np.random.default_rng(3).standard_normal((4, 32)).astype("float32")
    exact = x @ w
    for name, make in products.items():
        got = np.asarray(tf.function(lambda x, make=make: make()(x), autograph=False)(x))
        error = np.abs(got - exact).max() / np.abs(exact).max()
        assert error < (1e-5 if name == "float32" else 0.03), (name, error)
