"""Greedy and beam search against references written independently of the
search code (backend-agnostic: run under tensorflow, jax and torch): the
standard beam search in numpy over full forward passes of the model
(`model.predict_on_batch({"source", "target"})`), an exhaustive enumeration
of every output sequence, and greedy search with forced prefixes and
repeat blocking. The searches' own properties (cache, phases, limits,
ties, blockwise top-k) are in test_search.py, whose small models and
helpers these tests share; the two halves run on separate test workers.
"""

import itertools

import numpy as np
import pytest

from conftest import to_numpy
from keras_transformer.decoding import beam_search, greedy_search
from keras_transformer.decoding import beam as beam_module
from test_search import (
    BOS, EOS, EXTRA, PAD, as_numpy, draw_weights, full_log_probs, gnmt_penalty, limits_of, make_model, make_sources,
    numpy_log_softmax, output_tokens,
)

# Buffers of at most 16 positions: one phase at run time on every backend, and traced as one (conftest).
pytestmark = pytest.mark.usefixtures("one_phase_search")


def test_beam_size_one_equals_the_reference(tiny_vocabulary_model):
    """One live hypothesis drawn from the two best extensions: exactly the
    reference's output (greedy's path, but a hypothesis ending while the
    path goes on is kept)."""
    model = tiny_vocabulary_model
    source = make_sources(vocabulary_size=9, lengths=(4, 1, 3, 2, 4), seed=1)
    limits = [int(limit) for limit in limits_of(source)]
    for seed in range(3):
        draw_weights(model, seed=700 + seed, eos_scale=1.0 + 0.5 * seed)
        beam = as_numpy(beam_search(model, source, beam_size=1, alpha=0.0, max_extra_length=EXTRA))
        expected, _ = reference_beam_search(full_pass_log_probs(model, source), limits, 1, 0.0)
        for row, hypotheses in enumerate(expected):
            _, best_log_p, best_tokens = hypotheses[0]
            assert output_tokens(beam["ids"][row], beam["lengths"][row]) == list(best_tokens)
            np.testing.assert_allclose(beam["scores"][row], best_log_p, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# The standard beam search, written here independently of search.py: numpy
# over full forward passes of the model, one Python list per hypothesis.


def length_rule_penalty(length, alpha):
    """Marian's and Transformers' rule, written from Transformers'
    `_update_finished_beams` (it divides by the generated tokens, the EOS
    just chosen included, to the power `length_penalty`)."""
    return float(length) ** alpha


PENALTIES = {"gnmt": gnmt_penalty, "length": length_rule_penalty}


def reference_beam_search(log_probs_of, limits, beam_size, alpha, limit_rule="fallback", length_penalty="gnmt"):
    """GNMT / tensor2tensor beam search for every sentence of a batch.

    `log_probs_of(prefixes)` gives, for each sentence, a list of (decoder
    input -> next-token log-probabilities) results: it is called with one
    list of token prefixes per sentence and returns one array per prefix.
    No early stopping: a sentence runs until no live hypothesis is left, so
    the search's early stop is checked, not copied. `limit_rule` as the
    search's: "fallback" returns the live hypotheses at the limit only when
    none finished, "force_eos" allows only EOS at the last position,
    "finish" finishes a hypothesis cut at the limit. `length_penalty`
    names the rule that ranks finished hypotheses (`PENALTIES`). Returns, per sentence,
    the finished set sorted best first as (score, log P, tokens), and
    whether pruning changed anything (a finished hypothesis kept while live
    ones went on, or candidates cut to 2 * beam_size).
    """
    penalty = PENALTIES[length_penalty]
    live = [[((), 0.0)] for _ in limits]
    finished = [[] for _ in limits]
    pruned = [False for _ in limits]
    for step in range(max(limits)):
        active = [row for row, hypotheses in enumerate(live) if hypotheses and step < limits[row]]
        if not active:
            break
        rows_log_probs = log_probs_of({row: [tokens for tokens, _ in live[row]] for row in active})
        for row in active:
            last = step + 1 == limits[row]
            candidates = []
            for (tokens, log_p), next_log_probs in zip(live[row], rows_log_probs[row]):
                for token in range(len(next_log_probs)):
                    if token in (PAD, BOS) or not np.isfinite(next_log_probs[token]):
                        continue
                    if limit_rule == "force_eos" and last and token != EOS:
                        continue
                    candidates.append((log_p + float(next_log_probs[token]), tokens + (token,)))
            # Best first; ties to the earlier beam, then the lower token id.
            candidates.sort(key=lambda candidate: -candidate[0])
            if len(candidates) > 2 * beam_size:
                pruned[row] = True
            live[row] = []
            for log_p, tokens in candidates[: 2 * beam_size]:
                if tokens[-1] == EOS or (last and limit_rule == "finish"):
                    finished[row].append((log_p / penalty(len(tokens), alpha), log_p, tokens))
                elif len(live[row]) < beam_size:
                    live[row].append((tokens, log_p))
            if finished[row] and live[row] and not last:
                pruned[row] = True
            finished[row] = sorted(finished[row], key=lambda h: -h[0])[:beam_size]
    for row, hypotheses in enumerate(live):
        if limit_rule == "fallback" and not finished[row]:
            finished[row] = [(log_p / penalty(len(tokens), alpha), log_p, tokens) for tokens, log_p in hypotheses]
    return finished, pruned


def full_pass_log_probs(model, source):
    """`log_probs_of` for `reference_beam_search`: one full forward pass of
    every prefix of every sentence, batched in one shape (JAX compiles per shape)."""
    width = source.shape[1] + EXTRA

    def log_probs_of(prefixes):
        rows, targets = [], []
        for row, row_prefixes in prefixes.items():
            for tokens in row_prefixes:
                rows.append(row)
                targets.append([BOS, *tokens] + [PAD] * (width - 1 - len(tokens)))
        count = len(targets)
        padded = max(count, len(source) * 4)  # few distinct batch shapes
        targets += [[BOS] + [PAD] * (width - 1)] * (padded - count)
        sources = source[rows + [0] * (padded - count)]
        logits = to_numpy(model.predict_on_batch({"source": sources, "target": np.array(targets, "int32")}))
        log_probs = numpy_log_softmax(logits.astype("float64"))
        result = {row: [] for row in prefixes}
        for index, (row, tokens) in enumerate(zip(rows, (t for p in prefixes.values() for t in p))):
            result[row].append(log_probs[index, len(tokens)])
        return result

    return log_probs_of


@pytest.fixture(scope="module")
def tiny_vocabulary_model():
    # The defect's setting: 1+1 layers, a 9-token vocabulary.
    return make_model(vocabulary_size=9, num_encoder_layers=1, num_decoder_layers=1)


@pytest.mark.parametrize("beam_size, alpha, limit_rule, length_penalty", [
    (2, 0.0, "fallback", "gnmt"), (3, 0.6, "fallback", "gnmt"), (4, 0.6, "fallback", "gnmt"),
    (4, 0.0, "fallback", "gnmt"), (3, 0.0, "force_eos", "gnmt"), (2, 0.6, "force_eos", "gnmt"),
    (3, 0.6, "finish", "gnmt"), (2, 0.0, "finish", "gnmt"),
    # Marian's and Transformers' rule at 1.0 (the mean log P per token).
    (4, 1.0, "fallback", "length"),
])
def test_beam_search_equals_an_independent_standard_beam_search(beam_size, alpha, limit_rule, length_penalty,
                                                                tiny_vocabulary_model):
    model = tiny_vocabulary_model
    # Mixed source lengths in one batch (EOS included), limits source + EXTRA.
    source = make_sources(vocabulary_size=9, lengths=(4, 1, 3, 2, 4), seed=beam_size)
    limits = [int(limit) for limit in limits_of(source)]
    pruned_cases, compared, rows, cut = 0, 0, 0, 0
    for seed in range(8):
        # EOS scales from 1 to 2.75: some models end early, some run long.
        draw_weights(model, seed=100 * beam_size + seed, eos_scale=1.0 + 0.25 * seed)
        result = as_numpy(beam_search(model, source, beam_size=beam_size, alpha=alpha,
                                      max_extra_length=EXTRA, return_all_beams=True, limit_rule=limit_rule,
                                      length_penalty=length_penalty))
        expected, pruned = reference_beam_search(full_pass_log_probs(model, source), limits, beam_size, alpha,
                                                 limit_rule, length_penalty)
        for row, hypotheses in enumerate(expected):
            rows += 1
            best_score, best_log_p, best_tokens = hypotheses[0]
            # A near tie between the best two can go either way in float32.
            if len(hypotheses) > 1 and hypotheses[0][0] - hypotheses[1][0] < 1e-4:
                continue
            compared += 1
            pruned_cases += pruned[row]
            cut += best_tokens[-1] != EOS
            length = len(best_tokens)
            np.testing.assert_array_equal(result["ids"][row, 0, :length], best_tokens)
            assert np.all(result["ids"][row, 0, length:] == PAD)
            assert result["lengths"][row, 0] == length
            np.testing.assert_allclose(result["scores"][row, 0], best_score, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(result["log_probs"][row, 0], best_log_p, rtol=1e-4, atol=1e-4)
            # The whole finished set, best first (where the early stop left one).
            kept = result["scores"][row][np.isfinite(result["scores"][row])]
            np.testing.assert_allclose(kept, [h[0] for h in hypotheses][: len(kept)], rtol=1e-4, atol=1e-4)
    # Most rows were compared, and the reference pruned in most of those: a
    # search that kept every hypothesis could not pass this test by accident.
    assert compared >= 0.8 * rows, (compared, rows)
    assert pruned_cases >= compared // 2, (pruned_cases, compared)
    # The rule decided some outputs: cut hypotheses won under "finish" only
    # (and under "fallback" only where nothing ended).
    if limit_rule == "finish":
        assert cut > 0
    elif limit_rule == "force_eos":
        assert cut == 0


def test_finished_hypothesis_is_not_pushed_out_by_live_ones():
    """A hand-built step function: EOS alone is the third candidate at the
    first step and the best hypothesis overall, since every live extension
    later collapses. Pooling finished and live hypotheses in beam_size slots
    loses it; the standard search must return it."""
    from keras import ops


    vocabulary_size = 6  # pad, unk, bos, eos, a, b
    first = np.full(vocabulary_size, -np.inf)
    first[[EOS, 4, 5]] = np.log([0.2, 0.45, 0.35])
    later = np.full(vocabulary_size, -np.inf)
    later[[EOS, 4, 5]] = np.log([0.02, 0.49, 0.49])

    class Scripted:
        """Step API of `keras_transformer.models.incremental` with fixed log-probabilities."""

        def __init__(self, rows):
            self.initial_state = (ops.zeros((rows,), "float32"),)

        def step(self, state, last_tokens, step):
            table = ops.where(ops.equal(step, 0), ops.convert_to_tensor(first, "float32"),
                              ops.convert_to_tensor(later, "float32"))
            rows = ops.shape(last_tokens)[0]
            return ops.broadcast_to(ops.expand_dims(table, 0), (rows, vocabulary_size)), state

        def reorder(self, state, rows):
            return state

    class Model:
        pass

    model = Model()
    model.vocabulary_size = vocabulary_size
    model.incremental_decoder = lambda source_ids, beam_size, buffer_length, jit_compile, use_cache: Scripted(
        int(source_ids.shape[0]) * beam_size)
    source = np.array([[4, 4, EOS]], "int32")
    result = beam_module._beam(model, ops.convert_to_tensor(source), beam_size=2, alpha=0.0,
                                 max_extra_length=3, max_output_length=None, min_length=0, bos_id=BOS,
                                 eos_id=EOS, pad_id=PAD, use_cache=True, return_all_beams=False)
    result = as_numpy(result)
    # EOS alone: log 0.2 = -1.61; any longer hypothesis pays log 0.35 + log 0.49 + ...
    np.testing.assert_array_equal(result["ids"][0, :2], [EOS, PAD])
    np.testing.assert_allclose(result["scores"][0], np.log(0.2), rtol=1e-6)


def exhaustive_hypotheses(model, source_row, limit, alpha, vocabulary_size, limit_rule, length_penalty="gnmt"):
    """Every output sequence the rule can return (ending with EOS; under
    "finish" also those cut at `limit`) with its score under
    `length_penalty` (`PENALTIES`), best first."""
    allowed = [t for t in range(vocabulary_size) if t not in (PAD, BOS)]
    continuing = [t for t in allowed if t != EOS]
    sequences = []
    for length in range(1, limit + 1):
        for prefix in itertools.product(continuing, repeat=length - 1):
            sequences.append(list(prefix) + [EOS])
            if length == limit and limit_rule == "finish":  # cut at the limit without EOS
                sequences.extend(list(prefix) + [last] for last in continuing)
    padded = [[BOS] + s[:-1] + [PAD] * (limit - len(s)) for s in sequences]
    log_probs = full_log_probs(model, source_row, padded)
    hypotheses = []
    for index, sequence in enumerate(sequences):
        log_p = sum(log_probs[index, position, token] for position, token in enumerate(sequence))
        hypotheses.append((log_p / PENALTIES[length_penalty](len(sequence), alpha), log_p, sequence))
    return sorted(hypotheses, key=lambda h: -h[0])


@pytest.fixture(scope="module")
def six_token_model():
    # pad, unk, bos, eos and two words: 3 ways to continue. One model for
    # every case (its forward pass, for the enumeration, is compiled once).
    return make_model(vocabulary_size=6, seed=1)


@pytest.mark.parametrize("alpha, limit_rule, length_penalty", [
    (0.0, "fallback", "gnmt"), (0.6, "fallback", "gnmt"), (2.0, "fallback", "gnmt"), (0.6, "finish", "gnmt"),
    (2.0, "finish", "gnmt"), (0.6, "force_eos", "gnmt"), (1.0, "fallback", "length"),
])
def test_wide_beam_finds_the_exhaustive_optimum(alpha, limit_rule, length_penalty, six_token_model):
    model, vocabulary_size = six_token_model, 6
    # Non-pad source lengths 2 and 1 with max_extra_length=1: output limits 3 and 2.
    source = np.array([[4, EOS], [EOS, PAD]], "int32")
    beam_size = 40  # every hypothesis of length <= 3 fits: 1 + 3 + 9 * 4
    result = as_numpy(beam_search(model, source, beam_size=beam_size, alpha=alpha, max_extra_length=1,
                                  return_all_beams=True, limit_rule=limit_rule, length_penalty=length_penalty))
    best_lengths, rules_part = [], False
    for row, limit in enumerate([3, 2]):
        # Each sentence is scored alone, without the batch's padding.
        alone = source[row, : int((source[row] != PAD).sum())]
        expected = exhaustive_hypotheses(model, alone, limit, alpha, vocabulary_size, limit_rule, length_penalty)
        best_score, best_log_p, best_sequence = expected[0]
        # Whether GNMT's penalty would rank another sequence first (the same sequences, rescored).
        gnmt_best = max(expected, key=lambda h: h[1] / gnmt_penalty(len(h[2]), alpha))[2]
        rules_part |= gnmt_best != best_sequence
        best_lengths.append(len(best_sequence))
        assert len(expected) <= beam_size
        ids, lengths = result["ids"][row], result["lengths"][row]
        np.testing.assert_array_equal(ids[0, : len(best_sequence)], best_sequence)
        assert np.all(ids[0, len(best_sequence) :] == PAD)
        assert lengths[0] == len(best_sequence)
        np.testing.assert_allclose(result["scores"][row, 0], best_score, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(result["log_probs"][row, 0], best_log_p, rtol=1e-5, atol=1e-5)
        # The beam held every hypothesis: all scores match, the rest of the beam is empty.
        found = result["scores"][row]
        finite = found[np.isfinite(found)]
        np.testing.assert_allclose(finite, [h[0] for h in expected], rtol=1e-5, atol=1e-5)
        found_sequences = sorted(tuple(ids[k, : lengths[k]]) for k in range(len(finite)))
        assert found_sequences == sorted(tuple(h[2]) for h in expected)
    if alpha == 2.0 and limit_rule == "finish":
        assert best_lengths[0] == 3  # a strong penalty favours long (here: cut) hypotheses
    if length_penalty == "length":
        assert rules_part  # the rule decided an output: one that ignored it would fail above


# ---------------------------------------------------------------------------
# Constraints: repeated n-grams and forced prefixes


def repeated_ngrams(tokens, n):
    """Every n-gram that occurs more than once in `tokens` (brute force)."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return {gram for gram in grams if grams.count(gram) > 1}


@pytest.fixture(scope="module")
def repetitive_model():
    # A 1+1-layer 9-token model repeats itself readily over 12 tokens. One
    # model for every n: its unconstrained search is compiled once.
    return make_model(vocabulary_size=9, num_encoder_layers=1, num_decoder_layers=1, eos_scale=0.2, seed=5)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_size_blocks_every_repeat(n, repetitive_model):
    model = repetitive_model
    source = make_sources(vocabulary_size=9, lengths=(3, 5, 2, 4), seed=1)
    options = dict(max_extra_length=8, min_length=6)
    free = as_numpy(greedy_search(model, source, **options))
    free_repeats = sum(bool(repeated_ngrams(output_tokens(r, l), n)) for r, l in zip(free["ids"], free["lengths"]))
    assert free_repeats > 0  # the unconstrained outputs do repeat n-grams
    greedy = as_numpy(greedy_search(model, source, no_repeat_ngram_size=n, **options))
    beams = as_numpy(beam_search(model, source, beam_size=3, no_repeat_ngram_size=n, return_all_beams=True,
                                 **options))
    for ids, length in zip(greedy["ids"], greedy["lengths"]):
        assert not repeated_ngrams(output_tokens(ids, length), n)
    for row in range(len(source)):
        for k in range(3):
            if np.isfinite(beams["scores"][row, k]):
                assert not repeated_ngrams(output_tokens(beams["ids"][row, k], beams["lengths"][row, k]), n)


def reference_greedy(model, source, limits, prefixes=None, n=0, min_length=0):
    """Greedy over full forward passes with an optional forced prefix and
    repeat blocking, sentence by sentence (no code shared with search.py)."""
    outputs = []
    width = source.shape[1] + EXTRA
    for row in range(len(source)):
        tokens, total = [], 0.0
        prefix = [] if prefixes is None else [int(t) for t in prefixes[row] if t != PAD]
        while len(tokens) < limits[row] and (not tokens or tokens[-1] != EOS):
            log_probs = full_log_probs(model, source[row], [[BOS, *tokens] + [PAD] * (width - 1 - len(tokens))])
            log_probs = log_probs[0, len(tokens)].copy()
            allowed = log_probs.copy()
            allowed[[PAD, BOS]] = -np.inf
            if len(tokens) < min_length:
                allowed[EOS] = -np.inf
            if len(tokens) < len(prefix):
                keep = allowed[prefix[len(tokens)]]
                allowed[:] = -np.inf
                allowed[prefix[len(tokens)]] = keep
            if n:
                for token in range(len(allowed)):
                    if token != EOS and repeated_ngrams(tokens + [token], n):
                        allowed[token] = -np.inf
            token = int(np.argmax(allowed))
            tokens.append(token)
            total += log_probs[token]
        outputs.append((tokens, total))
    return outputs


@pytest.fixture(scope="module")
def prefix_model():
    # One model for both cases: the reference's forward pass is compiled once.
    return make_model(vocabulary_size=9, num_encoder_layers=1, num_decoder_layers=1, eos_scale=0.5, seed=6)


@pytest.mark.parametrize("n", [0, 2])
def test_greedy_with_prefix_and_blocking_equals_a_reference(n, prefix_model):
    model = prefix_model
    source = make_sources(vocabulary_size=9, lengths=(3, 5, 2, 4), seed=2)
    prefixes = np.array([[5, 6, 0], [0, 0, 0], [7, 0, 0], [4, 4, 8]], "int32")
    limits = limits_of(source)
    result = as_numpy(greedy_search(model, source, max_extra_length=EXTRA, prefix_ids=prefixes,
                                    no_repeat_ngram_size=n, min_length=2))
    expected = reference_greedy(model, source, limits, prefixes, n, min_length=2)
    for row, (tokens, total) in enumerate(expected):
        assert output_tokens(result["ids"][row], result["lengths"][row]) == tokens
        np.testing.assert_allclose(result["scores"][row], total, rtol=1e-4, atol=1e-4)
        prefix = [int(t) for t in prefixes[row] if t != PAD]
        assert tokens[: len(prefix)] == prefix


def test_beam_with_prefix_equals_the_reference_on_a_conditioned_model(tiny_vocabulary_model):
    model = tiny_vocabulary_model
    draw_weights(model, seed=11, eos_scale=1.5)
    source = make_sources(vocabulary_size=9, lengths=(4, 1, 3, 2, 4), seed=5)
    prefixes = np.array([[5, 6], [0, 0], [7, 0], [4, 4], [8, 0]], "int32")
    limits = [int(limit) for limit in limits_of(source)]
    result = as_numpy(beam_search(model, source, beam_size=3, alpha=0.6, max_extra_length=EXTRA,
                                  prefix_ids=prefixes))
    log_probs_of = full_pass_log_probs(model, source)

    def conditioned(prefixes_by_row):
        # The model conditioned by hand: only the prefix token at its positions.
        results = log_probs_of(prefixes_by_row)
        for row, row_prefixes in prefixes_by_row.items():
            forced = [int(t) for t in prefixes[row] if t != PAD]
            for tokens, log_probs in zip(row_prefixes, results[row]):
                if len(tokens) < len(forced):
                    keep = log_probs[forced[len(tokens)]]
                    log_probs[:] = -np.inf
                    log_probs[forced[len(tokens)]] = keep
        return results

    expected, _ = reference_beam_search(conditioned, limits, 3, 0.6)
    for row, hypotheses in enumerate(expected):
        best_score, best_log_p, best_tokens = hypotheses[0]
        assert output_tokens(result["ids"][row], result["lengths"][row]) == list(best_tokens)
        np.testing.assert_allclose(result["scores"][row], best_score, rtol=1e-4, atol=1e-4)
        forced = [int(t) for t in prefixes[row] if t != PAD]
        assert list(best_tokens[: len(forced)]) == forced


