"""Options that combine: forced prefixes with n-gram blocking, with sampling,
and blocking with beam search, each against a reference written here
(backend-agnostic: run under tensorflow, jax and torch).

The model is a bigram table driven through `StepFunction`: the next
token's log-probabilities depend on the last token alone, so the
references below are a few lines of numpy over the same table, sharing no
code with the search.
"""

import numpy as np
import pytest
from keras import ops
from scipy import stats

from conftest import to_numpy
from keras_transformer.decoding import StepFunction, beam_search, greedy_search, sampling_search

PAD, UNK, BOS, EOS = 0, 1, 2, 3
VOCABULARY = 12


STEPS = 24  # positions of the position term (more than any output here)


def bigram_table(seed, eos_weight=0.3):
    """Logits of the next token: (VOCABULARY + STEPS, VOCABULARY), rows for
    the last token, then a term per position, which breaks the exact ties
    that a pure bigram model gives reordered hypotheses."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(VOCABULARY, VOCABULARY)) * 1.5
    logits[:, EOS] += np.log(eos_weight)
    positions = rng.normal(size=(STEPS, VOCABULARY)) * 0.5
    return np.concatenate([logits, positions]).astype("float32")


def next_logits(table, tokens):
    return table[tokens[-1] if tokens else BOS] + table[VOCABULARY + len(tokens)]


def bigram_model(table):
    def tokens_to_logits(source_ids, inputs, step):
        table_tensor = ops.convert_to_tensor(table)
        by_token = ops.take(table_tensor, ops.take(inputs, step, axis=1), axis=0)
        return by_token + ops.expand_dims(ops.take(table_tensor, VOCABULARY + step, axis=0), 0)

    return StepFunction(tokens_to_logits, VOCABULARY)


def log_softmax(logits):
    logits = logits.astype("float64")
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def sources_of(lengths):
    """Sources of these non-pad lengths (EOS included): the limits are length + extra."""
    ids = np.zeros((len(lengths), max(lengths)), "int32")
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = 5
        ids[row, length - 1] = EOS
    return ids


def allowed_tokens(tokens, log_probs, prefix, n, min_length):
    """The tokens a hypothesis `tokens` may take next: the prefix's token
    while forced (even if it repeats an n-gram); else every finite token but
    pad and BOS, without EOS before min_length and without a token that
    completes an n-gram already present; EOS if nothing is left."""
    step = len(tokens)
    if step < len(prefix):
        return [prefix[step]]
    allowed = [t for t in range(len(log_probs)) if t not in (PAD, BOS) and np.isfinite(log_probs[t])]
    if step < min_length:
        allowed = [t for t in allowed if t != EOS]
    if n and step >= n - 1:
        seen = {tuple(tokens[i : i + n]) for i in range(step - n + 1)}
        context = tuple(tokens[step - n + 1 :]) if n > 1 else ()
        allowed = [t for t in allowed if t == EOS or context + (t,) not in seen]
    return allowed or [EOS]


def reference_greedy(table, limit, prefix, n, min_length=0):
    tokens, total = [], 0.0
    while len(tokens) < limit and (not tokens or tokens[-1] != EOS):
        log_probs = log_softmax(next_logits(table, tokens))
        allowed = allowed_tokens(tokens, log_probs, prefix, n, min_length)
        token = max(allowed, key=lambda t: (log_probs[t], -t))
        tokens.append(token)
        total += log_probs[token]
    return tokens, total


def reference_beam(table, limit, beam_size, alpha, prefix, n, min_length=0):
    """The standard beam search (tensor2tensor's limit rule), one list per hypothesis."""
    penalty = lambda length: ((5.0 + length) / 6.0) ** alpha
    live, finished = [((), 0.0)], []
    for _ in range(limit):
        candidates = []
        for tokens, log_p in live:
            log_probs = log_softmax(next_logits(table, tokens))
            for token in allowed_tokens(list(tokens), log_probs, prefix, n, min_length):
                candidates.append((log_p + log_probs[token], tokens + (token,)))
        candidates.sort(key=lambda candidate: -candidate[0])
        live = []
        for log_p, tokens in candidates[: 2 * beam_size]:
            if tokens[-1] == EOS:
                finished.append((log_p / penalty(len(tokens)), log_p, tokens))
            elif len(live) < beam_size:
                live.append((tokens, log_p))
        finished = sorted(finished, key=lambda h: -h[0])[:beam_size]
    if not finished:
        finished = [(log_p / penalty(len(tokens)), log_p, tokens) for tokens, log_p in live]
    return finished


def output(result, row, beam=None):
    ids = to_numpy(result["ids"])[row]
    lengths = to_numpy(result["lengths"])[row]
    if beam is not None:
        ids, lengths = ids[beam], lengths[beam]
    assert np.all(ids[lengths:] == PAD)
    return [int(t) for t in ids[:lengths]]


# Prefixes per row (padded with 0): the repeating one, one whose
# bigram recurs only after it, none, a single token.
PREFIXES = np.array([[8, 9, 8, 9], [6, 7, 0, 0], [0, 0, 0, 0], [10, 0, 0, 0]], "int32")
SOURCES = sources_of([5, 4, 3, 6])
EXTRA = 6


def prefix_of(row):
    return [int(t) for t in PREFIXES[row] if t != PAD]


def test_a_forced_prefix_that_repeats_an_ngram_is_emitted_whole():
    """Issue 33: prefix [8, 9, 8, 9] with no_repeat_ngram_size=2 banned the
    forced 9 itself: beam search returned nothing (score -inf), greedy and
    sampling emitted pad in its place."""
    model = bigram_model(bigram_table(0))
    options = dict(max_extra_length=EXTRA, prefix_ids=PREFIXES[:1], no_repeat_ngram_size=2)
    source = SOURCES[:1]
    for result in (greedy_search(model, source, **options), sampling_search(model, source, seed=3, **options),
                   beam_search(model, source, beam_size=3, **options)):
        tokens = output(result, 0)
        assert tokens[:4] == [8, 9, 8, 9]
        assert PAD not in tokens and np.isfinite(to_numpy(result["scores"])[0])
        # After the prefix the bigrams (8, 9) and (9, 8) stay banned.
        rest = tokens[3:]
        assert all((a, b) not in ((8, 9), (9, 8)) for a, b in zip(rest, rest[1:]))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_greedy_with_prefix_and_blocking_equals_the_reference(n):
    for seed in range(3):
        table = bigram_table(seed, eos_weight=0.1)
        result = greedy_search(bigram_model(table), SOURCES, max_extra_length=EXTRA, prefix_ids=PREFIXES,
                               no_repeat_ngram_size=n)
        for row in range(len(SOURCES)):
            limit = int((SOURCES[row] != PAD).sum()) + EXTRA
            tokens, total = reference_greedy(table, limit, prefix_of(row), n)
            assert output(result, row) == tokens, (seed, row)
            np.testing.assert_allclose(to_numpy(result["scores"])[row], total, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("beam_size, alpha, n, with_prefix", [
    (2, 0.0, 2, False), (3, 0.6, 1, False), (4, 0.6, 2, True), (3, 1.0, 3, True),
])
def test_beam_with_blocking_equals_the_reference(beam_size, alpha, n, with_prefix):
    compared = 0
    for seed in range(3):
        table = bigram_table(10 + seed, eos_weight=0.2)
        prefixes = PREFIXES if with_prefix else None
        result = beam_search(bigram_model(table), SOURCES, beam_size=beam_size, alpha=alpha,
                             max_extra_length=EXTRA, prefix_ids=prefixes, no_repeat_ngram_size=n,
                             return_all_beams=True)
        scores = to_numpy(result["scores"])
        for row in range(len(SOURCES)):
            limit = int((SOURCES[row] != PAD).sum()) + EXTRA
            prefix = prefix_of(row) if with_prefix else []
            expected = reference_beam(table, limit, beam_size, alpha, prefix, n)
            np.testing.assert_allclose(scores[row, : len(expected)], [h[0] for h in expected], rtol=1e-5,
                                       atol=1e-5)
            assert not np.isfinite(scores[row, len(expected):]).any()
            if len(expected) > 1 and expected[0][0] - expected[1][0] < 1e-4:
                continue  # a near tie can go either way in float32
            compared += 1
            assert output(result, row, 0) == list(expected[0][2])
    assert compared >= 9


def test_blocking_with_min_length_leaves_eos_when_nothing_else_is_allowed():
    # n = 1 allows each token once: 9 non-special tokens (unk included), so
    # min_length 12 cannot be met; EOS comes once nothing else is left.
    table = bigram_table(4, eos_weight=0.01)
    model = bigram_model(table)
    source = sources_of([9])
    options = dict(max_extra_length=10, no_repeat_ngram_size=1, min_length=12)
    greedy = greedy_search(model, source, **options)
    tokens, total = reference_greedy(table, 19, [], 1, min_length=12)
    assert output(greedy, 0) == tokens and tokens[-1] == EOS and len(tokens) == 10
    np.testing.assert_allclose(to_numpy(greedy["scores"])[0], total, rtol=1e-5)
    beam = beam_search(model, source, beam_size=2, alpha=0.0, **options)
    expected = reference_beam(table, 19, 2, 0.0, [], 1, min_length=12)
    assert output(beam, 0) == list(expected[0][2])
    sampled = sampling_search(model, np.repeat(source, 8, axis=0), seed=0, **options)
    for row in range(8):
        tokens = output(sampled, row)
        assert tokens[-1] == EOS and sorted(tokens[:-1]) == [UNK] + list(range(4, VOCABULARY))


def test_sampling_after_a_prefix_draws_from_the_blocked_distribution():
    """Prefix [8, 9, 8] with n = 2: the next token is drawn from P(. | 8 9 8)
    without 9 (the bigram (8, 9) is taken), pad and BOS; a chi-square test
    over 4000 draws."""
    table = bigram_table(7)
    draws = 4000
    source = np.repeat(sources_of([2]), draws, axis=0)
    prefixes = np.repeat(np.array([[8, 9, 8]], "int32"), draws, axis=0)
    result = sampling_search(bigram_model(table), source, seed=5, max_output_length=4, prefix_ids=prefixes,
                             no_repeat_ngram_size=2)
    ids = to_numpy(result["ids"])
    assert np.all(ids[:, :3] == [8, 9, 8])
    probabilities = np.exp(log_softmax(next_logits(table, [8, 9, 8])))
    probabilities[[PAD, BOS, 9]] = 0.0
    probabilities /= probabilities.sum()
    observed = np.bincount(ids[:, 3], minlength=VOCABULARY)
    assert observed[[PAD, BOS, 9]].sum() == 0
    allowed = probabilities > 0
    p_value = stats.chisquare(observed[allowed], probabilities[allowed] * draws).pvalue
    assert p_value > 1e-3, (observed, probabilities * draws)
