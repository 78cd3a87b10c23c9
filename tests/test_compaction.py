"""Dropping the sentences that are done between decoding phases
(`phases.compacts`: TensorFlow without XLA, PyTorch). Under JAX the phases
carry the whole batch, so the module is skipped there: its comparisons
would set the search against itself (test_search_references.py holds the
JAX searches to the references).

A batch whose sentences finish in different phases (mixed source lengths,
so mixed length limits, and EOS drawn at different steps) gives exactly
what the same search without compaction gives, and what the independent
references of test_search_references.py give. The ladder is shrunk to
phases of 2, 4 and 8 positions (then the buffer's 9-12) so that the
references stay cheap; one test keeps the shipped ladder, crossing 16, 32
and 64 positions.
"""

import weakref

import keras
import numpy as np
import pytest

from keras_transformer.decoding import beam_search, compiled, greedy_search, phases, sampling_search
from keras_transformer.models import incremental
from conftest import to_numpy
from test_search import EXTRA, PAD, as_numpy, draw_weights, limits_of, make_model, make_sources, output_tokens
from test_search_references import full_pass_log_probs, reference_beam_search, reference_greedy

pytestmark = pytest.mark.skipif(keras.backend.backend() == "jax", reason="JAX compiles fixed shapes: sentences are dropped only in row buckets there (test_row_buckets.py)")
LENGTHS = (1, 8, 3, 6, 2, 7, 4, 5)  # limits 5 .. 12 with EXTRA = 4
PREFIXES = np.array([[5, 6, 0], [0, 0, 0], [7, 0, 0], [4, 4, 8], [0, 0, 0], [6, 0, 0], [0, 0, 0], [8, 8, 0]],
                    "int32")


@pytest.fixture(scope="module")
def model():
    return make_model(vocabulary_size=9, num_encoder_layers=1, num_decoder_layers=1)


@pytest.fixture(scope="module")
def source():
    return make_sources(vocabulary_size=9, lengths=LENGTHS, seed=4)


# What each `IncrementalDecoder.select` kept, as the searches ran. Module-level: a search compiled in an
# earlier test (compiled.py caches it per model and options) records here too.
KEPT = []


def record_kept(sentences):
    """Appends the number of sentences a `select` keeps, when the search runs: at once where the count
    is known (eager TensorFlow, PyTorch), else (a TensorFlow graph, where it is unknown while tracing)
    by a stateful op that a tf.function always runs."""
    if sentences.shape[0] is not None:
        KEPT.append(int(sentences.shape[0]))
        return
    import tensorflow as tf

    tf.numpy_function(lambda count: KEPT.append(int(count)) or np.int32(0), [tf.shape(sentences)[0]], tf.int32,
                      stateful=True)


@pytest.fixture
def kept_counts(monkeypatch):
    """The number of sentences each `IncrementalDecoder.select` kept between phases, as the search ran
    (nothing is recorded while a graph is traced)."""
    KEPT.clear()
    select = incremental.IncrementalDecoder.select

    def counting_select(self, sentences):
        record_kept(sentences)
        return select(self, sentences)

    monkeypatch.setattr(incremental.IncrementalDecoder, "select", counting_select)
    yield KEPT
    KEPT.clear()


@pytest.fixture
def selections(kept_counts, monkeypatch):
    """`kept_counts`, with the ladder shrunk to 2, 4, 8."""
    monkeypatch.setattr(phases, "PHASE_CAPACITIES", (2, 4, 8))
    return kept_counts


def without_compaction(monkeypatch, run):
    with monkeypatch.context() as patch:
        patch.setattr(phases, "compacts", lambda jit_compile: False)
        # Not the compiled search of the run with compaction (the cache's key ignores the switch).
        patch.setattr(compiled, "_COMPILED", weakref.WeakKeyDictionary())
        return as_numpy(run())


def assert_same_outputs(compacted, whole):
    np.testing.assert_array_equal(compacted["ids"], whole["ids"])
    np.testing.assert_array_equal(compacted["lengths"], whole["lengths"])
    # Products over fewer rows may round differently in the last bit.
    np.testing.assert_allclose(compacted["scores"], whole["scores"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(compacted["log_probs"], whole["log_probs"], rtol=1e-6, atol=1e-6)


SEARCHES = {
    "beam n-best": lambda m, s: beam_search(m, s, beam_size=3, alpha=0.6, max_extra_length=EXTRA,
                                            return_all_beams=True),
    "beam constrained": lambda m, s: beam_search(m, s, beam_size=2, max_extra_length=EXTRA, prefix_ids=PREFIXES,
                                                 no_repeat_ngram_size=2, min_length=2, return_all_beams=True),
    "greedy constrained": lambda m, s: greedy_search(m, s, max_extra_length=EXTRA, prefix_ids=PREFIXES,
                                                     no_repeat_ngram_size=2, limit_rule="force_eos"),
    "sampling": lambda m, s: sampling_search(m, s, seed=1, top_p=0.9, max_extra_length=EXTRA),
}


@pytest.mark.parametrize("search", list(SEARCHES))
def test_compaction_changes_no_output(search, model, source, selections, monkeypatch):
    draw_weights(model, seed=8, eos_scale=2.0)
    compacted = as_numpy(SEARCHES[search](model, source))
    # The search that ran dropped sentences between phases (a count from the run, not from tracing).
    assert selections and min(selections) < len(LENGTHS), selections
    assert_same_outputs(compacted, without_compaction(monkeypatch, lambda: SEARCHES[search](model, source)))
    lengths = compacted["lengths"].reshape(len(LENGTHS), -1)[:, 0]
    assert len(set(lengths.tolist())) > 2, lengths  # the sentences finished at different steps


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_phases_carry_only_the_sentences_not_done(search, model, source, selections):
    """Run eagerly (TensorFlow without a graph; PyTorch always) to see the
    sizes: each phase after the first keeps fewer sentences."""
    draw_weights(model, seed=8, eos_scale=2.0)
    if search == "beam":
        beam_search(model, source, beam_size=2, max_extra_length=EXTRA, compile=False)
        assert len(selections) == 3  # before the phases of 4, 8 and the buffer
        assert selections == sorted(selections, reverse=True) and selections[-1] < len(LENGTHS), selections
    else:
        lengths = to_numpy(greedy_search(model, source, max_extra_length=EXTRA, compile=False)["lengths"])
        # A greedy sentence is done once it has its output.
        assert selections == [int(np.sum(lengths > capacity)) for capacity in (2, 4, 8)]
        assert selections[-1] < len(LENGTHS)


def test_beam_n_best_equals_the_reference(model, source, selections):
    """The whole finished set of every sentence, best first, against the
    independent standard beam search, with sentences finishing in every phase."""
    limits = [int(limit) for limit in limits_of(source)]
    compared = 0
    for seed, eos_scale in ((8, 2.0), (7, 2.0)):
        draw_weights(model, seed=seed, eos_scale=eos_scale)
        result = as_numpy(beam_search(model, source, beam_size=3, alpha=0.6, max_extra_length=EXTRA,
                                      return_all_beams=True))
        expected, _ = reference_beam_search(full_pass_log_probs(model, source), limits, 3, 0.6)
        for row, hypotheses in enumerate(expected):
            if len(hypotheses) > 1 and hypotheses[0][0] - hypotheses[1][0] < 1e-4:
                continue  # a near tie can go either way in float32
            compared += 1
            _, best_log_p, best_tokens = hypotheses[0]
            assert output_tokens(result["ids"][row, 0], result["lengths"][row, 0]) == list(best_tokens)
            np.testing.assert_allclose(result["log_probs"][row, 0], best_log_p, rtol=1e-4, atol=1e-4)
            kept = result["scores"][row][np.isfinite(result["scores"][row])]
            np.testing.assert_allclose(kept, [h[0] for h in hypotheses][: len(kept)], rtol=1e-4, atol=1e-4)
    assert compared >= len(LENGTHS)


def test_greedy_with_prefix_and_blocking_equals_the_reference(model, source, selections):
    draw_weights(model, seed=8, eos_scale=2.0)
    result = as_numpy(greedy_search(model, source, max_extra_length=EXTRA, prefix_ids=PREFIXES,
                                    no_repeat_ngram_size=2, min_length=2))
    expected = reference_greedy(model, source, limits_of(source), PREFIXES, 2, min_length=2)
    for row, (tokens, total) in enumerate(expected):
        assert output_tokens(result["ids"][row], result["lengths"][row]) == tokens
        assert np.all(result["ids"][row, len(tokens):] == PAD)
        np.testing.assert_allclose(result["scores"][row], total, rtol=1e-4, atol=1e-4)
    assert len({len(tokens) for tokens, _ in expected}) > 2


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_shipped_ladder_crossing_16_32_and_64(search, model, kept_counts, monkeypatch):
    """Limits of 10, 22, 38 and 68 tokens: sentences finish in the phases of
    16, 32, 64 and 128 positions, and each phase after the first carries
    only the sentences not done (3, then 2, then 1)."""
    source = make_sources(vocabulary_size=9, lengths=(2, 14, 30, 60), seed=5)
    draw_weights(model, seed=8, eos_scale=0.0)  # EOS does not win: all run to their limits
    if search == "beam":
        def run():
            # min_length 9: no hypothesis ends before its sentence's limit is near.
            return beam_search(model, source, beam_size=2, max_extra_length=8, min_length=9, limit_rule="finish")
    else:
        def run():
            return greedy_search(model, source, max_extra_length=8)
    compacted = as_numpy(run())
    # A TensorFlow graph (source width unknown when traced) runs every rung, the last selecting none.
    assert kept_counts[:3] == [3, 2, 1] and not any(kept_counts[3:]), kept_counts
    assert_same_outputs(compacted, without_compaction(monkeypatch, run))
    np.testing.assert_array_equal(compacted["lengths"], limits_of(source, 8))
