"""One input contract (backend-agnostic: run under tensorflow, jax and torch).

Ids outside the model's vocabularies, sources longer than a learned
position table, and targets whose decoder input would be, raise the same
ValueError naming the limit on every backend, from every search and from
scoring. Before the check, TensorFlow raised InvalidArgumentError, JAX
returned empty ids with score -inf (its `take` fills out-of-range rows),
and scoring under JAX returned nan.
"""

import numpy as np
import pytest

from conftest import to_numpy
from keras_transformer.decoding import beam_search, greedy_search, sampling_search, score_translations
from keras_transformer.decoding.inputs import DEFAULT_MAX_SOURCE_LENGTH, source_length_limit, truncate_source
from test_search import EOS, PAD, make_model, make_sources

SEARCHES = {
    "greedy": lambda model, source: greedy_search(model, source, max_extra_length=3),
    "beam": lambda model, source: beam_search(model, source, beam_size=2, max_extra_length=3),
    "sampling": lambda model, source: sampling_search(model, source, seed=0, max_extra_length=3),
    "score": lambda model, source: score_translations(model, source, np.full((len(source), 2), 5, "int32")),
}


@pytest.fixture(scope="module")
def model():
    return make_model(vocabulary_size=12, num_encoder_layers=1, num_decoder_layers=1)


@pytest.fixture(scope="module")
def learned():
    return make_model(vocabulary_size=12, num_encoder_layers=1, num_decoder_layers=1,
                      positional_encoding="learned", max_length=8)


@pytest.mark.parametrize("search", sorted(SEARCHES))
@pytest.mark.parametrize("bad_id", [12, 40, -1])
def test_source_ids_outside_the_vocabulary_are_refused(search, bad_id, model):
    source = make_sources(vocabulary_size=12, lengths=(4, 3))
    source[1, 1] = bad_id
    with pytest.raises(ValueError, match=rf"`source_ids` row 1 holds id {bad_id} at position 1.*12 ids.*\[0, 12\)"):
        SEARCHES[search](model, source)


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_sources_longer_than_learned_positions_are_refused(search, learned):
    source = make_sources(vocabulary_size=12, lengths=(9, 3))
    with pytest.raises(ValueError, match=r"`source_ids` holds a source of 9 ids.*max_length=8"):
        SEARCHES[search](learned, source)


def test_padding_beyond_learned_positions_changes_nothing(learned):
    source = make_sources(vocabulary_size=12, lengths=(8, 3))
    wide = np.pad(source, ((0, 0), (0, 4)))  # 12 columns, at most 8 ids
    for search in ("greedy", "beam", "score"):
        narrow_result = {k: to_numpy(v) for k, v in SEARCHES[search](learned, source).items()}
        wide_result = {k: to_numpy(v) for k, v in SEARCHES[search](learned, wide).items()}
        np.testing.assert_allclose(wide_result["scores"], narrow_result["scores"], rtol=1e-5, atol=1e-5)
        assert np.isfinite(wide_result["scores"]).all()


def test_targets_are_checked_for_scoring(model, learned):
    source = make_sources(vocabulary_size=12, lengths=(4, 3))
    targets = np.array([[5, 6, 0], [7, 12, 0]], "int32")
    with pytest.raises(ValueError, match=r"`target_ids` row 1 holds id 12 at position 1.*\[0, 12\)"):
        score_translations(model, source, targets)
    # Learned positions: BOS + 7 tokens fill the 8 positions; 8 tokens do not.
    fits = np.full((2, 7), 5, "int32")
    assert np.isfinite(to_numpy(score_translations(learned, source, fits)["log_probs"])).all()
    with pytest.raises(ValueError, match=r"`target_ids` holds a target of 8 tokens.*max_length=8.*at most 7"):
        score_translations(learned, source, np.full((2, 8), 5, "int32"))
    # Padding columns beyond are dropped, not refused.
    padded = np.pad(fits, ((0, 0), (0, 3)))
    np.testing.assert_allclose(to_numpy(score_translations(learned, source, padded)["log_probs"]),
                               to_numpy(score_translations(learned, source, fits)["log_probs"]), rtol=1e-5)


def test_one_truncation_rule():
    assert truncate_source([5, 6, 7], None) == ([5, 6, 7, EOS], False)
    assert truncate_source([5, 6, 7], 4) == ([5, 6, 7, EOS], False)  # 4 ids with EOS: fits
    assert truncate_source([5, 6, 7, 8], 4) == ([5, 6, 7, EOS], True)
    assert truncate_source([], 2) == ([EOS], False)


def test_the_source_limit_follows_learned_positions(model, learned):
    assert source_length_limit(model) == DEFAULT_MAX_SOURCE_LENGTH == 256 and source_length_limit(model, 20) == 20
    assert source_length_limit(learned) == 8 and source_length_limit(learned, 20) == 8
    assert source_length_limit(learned, 5) == 5
    assert PAD == 0
