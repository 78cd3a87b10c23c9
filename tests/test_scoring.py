"""Scoring given translations (backend-agnostic).

Checked against log-probabilities computed in the test from full forward
passes (numpy log-softmax of the model's logits), and against the searches:
a beam or greedy output, scored, gets back the score the search gave it.
"""

import numpy as np
import pytest

from conftest import to_numpy
from keras_transformer.decoding import beam_search, greedy_search, score_translations
from test_search import BOS, EOS, EXTRA, PAD, as_numpy, gnmt_penalty, make_model, make_sources, numpy_log_softmax

# Buffers of at most 16 positions: one phase at run time on every backend, and traced as one (conftest).
pytestmark = pytest.mark.usefixtures("one_phase_search")


@pytest.fixture(scope="module")
def model():
    return make_model()


def test_scores_equal_full_pass_log_probabilities(model):
    source = make_sources()
    targets = np.array([[5, 6, 7, 0], [4, 0, 0, 0], [9, 9, 9, 9], [0, 0, 0, 0]], "int32")
    result = as_numpy(score_translations(model, source, targets, alpha=0.6))
    for row in range(len(source)):
        tokens = [int(t) for t in targets[row] if t != PAD] + [EOS]
        inputs = np.array([[BOS] + tokens[:-1]], "int32")
        logits = to_numpy(model.predict_on_batch({"source": source[row : row + 1], "target": inputs}))
        log_probs = numpy_log_softmax(logits[0].astype("float64"))
        expected = [log_probs[position, token] for position, token in enumerate(tokens)]
        np.testing.assert_allclose(result["token_log_probs"][row, : len(tokens)], expected, rtol=1e-4, atol=1e-4)
        assert np.all(result["token_log_probs"][row, len(tokens) :] == 0)
        assert result["lengths"][row] == len(tokens)
        np.testing.assert_allclose(result["log_probs"][row], sum(expected), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(
            result["scores"][row], sum(expected) / gnmt_penalty(len(tokens), 0.6), rtol=1e-4, atol=1e-4
        )


@pytest.mark.parametrize("search, rule", [("greedy", "gnmt"), ("beam", "gnmt"), ("beam", "length")])
def test_search_outputs_score_back_to_their_search_scores(search, rule, model):
    """Under either length penalty (the "length" rule divides by the
    tokens, EOS counted, to the power alpha: checked by hand here)."""
    source = make_sources()
    if search == "greedy":
        result = as_numpy(greedy_search(model, source, max_extra_length=EXTRA))
    else:
        # min_length 6 leaves the shortest sentence (limit 5) no EOS. CTranslate2's limit rule ("finish"):
        # hypotheses cut at the limit are returned with their scores beside finished ones (under the
        # default rule they are returned only when none finished, and their beams are -inf otherwise).
        result = as_numpy(beam_search(model, source, beam_size=3, alpha=0.6, max_extra_length=EXTRA,
                                      min_length=6, return_all_beams=True, limit_rule="finish",
                                      length_penalty=rule))
        result = {key: value.reshape((-1,) + value.shape[2:]) for key, value in result.items()}
        source = np.repeat(source, 3, axis=0)
    ended = np.array([EOS in ids[:length] for ids, length in zip(result["ids"], result["lengths"])])
    assert ended.any() and not ended.all()  # both endings: EOS, and cut at the limit
    targets = np.where(result["ids"] == EOS, PAD, result["ids"])
    for append_eos in (True, False):
        rows = ended if append_eos else ~ended
        scored = as_numpy(score_translations(model, source[rows], targets[rows], alpha=0.6, append_eos=append_eos,
                                             length_penalty=rule))
        if rule == "length":
            np.testing.assert_allclose(scored["scores"], scored["log_probs"] / scored["lengths"] ** 0.6, rtol=1e-5)
        np.testing.assert_allclose(scored["log_probs"], result["log_probs"][rows], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(scored["lengths"], result["lengths"][rows])
        if search == "beam":
            np.testing.assert_allclose(scored["scores"], result["scores"][rows], rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_named(model):
    source = make_sources()
    with pytest.raises(ValueError, match="target_ids.*2-D"):
        score_translations(model, source, np.array([1, 2]))
    with pytest.raises(ValueError, match="4 rows but `target_ids` has 3"):
        score_translations(model, source, np.zeros((3, 2), "int32"))
    with pytest.raises(ValueError, match="alpha"):
        score_translations(model, source, np.zeros((4, 2), "int32"), alpha=-1)
