"""The length-limit rule, on a hand-written Markov chain driven through
`StepFunction` (backend-agnostic: run under tensorflow, jax and torch).

The chain (issue 33): from BOS, P(a) = 0.9, P(b) = 0.09, P(EOS) = 0.01;
after "a", P(a) = 0.95, P(EOS) = 0.04, P(b) = 0.01; after "b", P(EOS) =
0.99, P(a) = 0.01. A source of one token (EOS) with max_extra_length=9
allows 10 tokens. "a" * 10 (log P -0.57) is the most probable sequence but
never ends; "b EOS" (log P -2.42) is the best that ends.
"""

import math

import numpy as np
import pytest
from keras import ops

from conftest import to_numpy
from keras_transformer.decoding import LIMIT_RULES, StepFunction, beam_search, greedy_search, sampling_search

PAD, UNK, BOS, EOS, A, B = range(6)
VOCABULARY = 6


def chain(eos_after_a=0.04):
    table = np.zeros((VOCABULARY, VOCABULARY))
    table[BOS, [A, B, EOS]] = [0.9, 0.09, 0.01]
    table[A, [A, EOS, B]] = [0.99 - eos_after_a, eos_after_a, 0.01]
    table[B, [EOS, A]] = [0.99, 0.01]
    table[[PAD, UNK, EOS]] = 1.0 / VOCABULARY  # never reached
    assert np.allclose(table.sum(1), 1.0)
    with np.errstate(divide="ignore"):
        return np.log(table).astype("float32")


def markov(eos_after_a=0.04):
    log_table = chain(eos_after_a)

    def tokens_to_logits(source_ids, inputs, step):
        last = ops.take(inputs, step, axis=1)
        return ops.take(ops.convert_to_tensor(log_table), last, axis=0)

    return StepFunction(tokens_to_logits, VOCABULARY), log_table


SOURCE = np.array([[EOS]], "int32")
OPTIONS = dict(max_extra_length=9, bos_id=BOS, eos_id=EOS, pad_id=PAD)


def log_p(log_table, tokens):
    previous = [BOS] + tokens[:-1]
    return float(sum(log_table[p, t] for p, t in zip(previous, tokens)))


def tokens_of(result, row=0):
    ids = to_numpy(result["ids"])[row]
    length = int(to_numpy(result["lengths"])[row])
    assert np.all(ids[length:] == PAD)
    return [int(t) for t in ids[:length]]


@pytest.mark.parametrize("compile", [True, False], ids=["compiled", "eager"])
def test_a_hypothesis_cut_at_the_limit_does_not_beat_one_that_ended(compile):
    model, log_table = markov()
    expected = log_p(log_table, [B, EOS])
    assert expected == pytest.approx(-2.42, abs=0.005)
    for rule in ("fallback", "force_eos"):
        result = beam_search(model, SOURCE, beam_size=4, alpha=0.0, limit_rule=rule, compile=compile, **OPTIONS)
        assert tokens_of(result) == [B, EOS], rule
        np.testing.assert_allclose(to_numpy(result["scores"])[0], expected, rtol=1e-5)
    # CTranslate2's rule, kept as an option: the run-on hypothesis wins unpaid.
    result = beam_search(model, SOURCE, beam_size=4, alpha=0.0, limit_rule="finish", compile=compile, **OPTIONS)
    assert tokens_of(result) == [A] * 10
    np.testing.assert_allclose(to_numpy(result["scores"])[0], log_p(log_table, [A] * 10), rtol=1e-5)
    assert log_p(log_table, [A] * 10) == pytest.approx(-0.57, abs=0.005)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_fallback_returns_the_cut_hypotheses_when_none_ended(alpha):
    # min_length beyond the limit forbids EOS throughout: nothing ends.
    model, log_table = markov()
    options = dict(OPTIONS, min_length=20)
    result = beam_search(model, SOURCE, beam_size=2, alpha=alpha, return_all_beams=True, **options)
    ids, scores = to_numpy(result["ids"])[0], to_numpy(result["scores"])[0]
    lengths, log_probs = to_numpy(result["lengths"])[0], to_numpy(result["log_probs"])[0]
    penalty = ((5 + 10) / 6) ** alpha
    assert lengths.tolist() == [10, 10]
    assert ids[0].tolist() == [A] * 10  # the best live hypothesis at the limit
    for k in range(2):
        tokens = [int(t) for t in ids[k]]
        assert EOS not in tokens
        np.testing.assert_allclose(log_probs[k], log_p(log_table, tokens), rtol=1e-5)
        np.testing.assert_allclose(scores[k], log_probs[k] / penalty, rtol=1e-5)
    assert scores[0] >= scores[1]
    # force_eos ends it anyway, overriding min_length at the last position.
    forced = beam_search(model, SOURCE, beam_size=2, alpha=alpha, limit_rule="force_eos", **options)
    tokens = tokens_of(forced)
    assert tokens[-1] == EOS and len(tokens) == 10 and EOS not in tokens[:-1]
    np.testing.assert_allclose(to_numpy(forced["log_probs"])[0], log_p(log_table, tokens), rtol=1e-5)


def test_one_hypothesis_searches_follow_the_rule():
    model, log_table = markov()
    for rule in ("fallback", "finish"):
        assert tokens_of(greedy_search(model, SOURCE, limit_rule=rule, **OPTIONS)) == [A] * 10
    forced = greedy_search(model, SOURCE, limit_rule="force_eos", **OPTIONS)
    assert tokens_of(forced) == [A] * 9 + [EOS]
    np.testing.assert_allclose(to_numpy(forced["scores"])[0], log_p(log_table, [A] * 9 + [EOS]), rtol=1e-5)
    # Sampling: with the rule, every draw ends with EOS within the limit.
    sources = np.full((16, 1), EOS, "int32")
    sampled = sampling_search(model, sources, seed=0, limit_rule="force_eos", **OPTIONS)
    ids, lengths = to_numpy(sampled["ids"]), to_numpy(sampled["lengths"])
    assert all(ids[row, lengths[row] - 1] == EOS for row in range(16))
    assert lengths.max() <= 10


def test_bad_limit_rule_is_named():
    model, _ = markov()
    assert LIMIT_RULES == ("fallback", "force_eos", "finish")
    with pytest.raises(ValueError, match="limit_rule"):
        beam_search(model, SOURCE, limit_rule="t2t", **OPTIONS)
    with pytest.raises(ValueError, match="limit_rule"):
        greedy_search(model, SOURCE, limit_rule=None, **OPTIONS)
