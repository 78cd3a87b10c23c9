"""Random sampling (backend-agnostic): the draws follow the model's distribution.

The expected distribution comes from a full forward pass, softmax'd in numpy;
the draws are tested with a chi-square goodness-of-fit test.
"""

import numpy as np
import pytest
from scipy import stats

from conftest import to_numpy
from keras_transformer.decoding import greedy_search, sampling_search
from test_search import BOS, EXTRA, PAD, as_numpy, make_model, make_sources

# Buffers of at most 16 positions: one phase at run time on every backend, and traced as one (conftest).
pytestmark = pytest.mark.usefixtures("one_phase_search")

DRAWS = 4000
SIGNIFICANCE = 1e-3  # a correct sampler fails this test once in a thousand seeds


@pytest.fixture(scope="module")
def model():
    return make_model(eos_scale=0.5)


def first_token_distribution(model, source_row, temperature=1.0):
    logits = to_numpy(model.predict_on_batch({"source": source_row[None], "target": np.array([[BOS]], "int32")}))
    logits = logits[0, 0].astype("float64") / temperature
    logits[[PAD, BOS]] = -np.inf
    probabilities = np.exp(logits - logits.max())
    return probabilities / probabilities.sum()


def first_tokens(model, source_row, seed, **options):
    source = np.repeat(source_row[None], DRAWS, axis=0)
    result = as_numpy(sampling_search(model, source, max_output_length=1, seed=seed, **options))
    return result["ids"][:, 0]


def chi_square_p(tokens, probabilities):
    allowed = probabilities > 0
    observed = np.bincount(tokens, minlength=len(probabilities))
    assert observed[~allowed].sum() == 0  # nothing outside the support
    return stats.chisquare(observed[allowed], probabilities[allowed] * len(tokens)).pvalue


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_draws_follow_the_softmax(model, temperature):
    source_row = make_sources()[0]
    expected = first_token_distribution(model, source_row, temperature)
    tokens = first_tokens(model, source_row, seed=1, temperature=temperature)
    assert chi_square_p(tokens, expected) > SIGNIFICANCE
    # The test has power: the same draws against another temperature's distribution fail it.
    other = first_token_distribution(model, source_row, temperature * 2)
    assert chi_square_p(tokens, other) < SIGNIFICANCE


def test_top_k_and_top_p_keep_only_the_best_tokens(model):
    source_row = make_sources()[0]
    probabilities = first_token_distribution(model, source_row)
    order = np.argsort(-probabilities)
    top3 = first_tokens(model, source_row, seed=2, top_k=3)
    assert set(top3.tolist()) <= set(order[:3].tolist())
    truncated = np.zeros_like(probabilities)
    truncated[order[:3]] = probabilities[order[:3]]
    assert chi_square_p(top3, truncated / truncated.sum()) > SIGNIFICANCE
    # Nucleus: the smallest set of best tokens holding at least top_p.
    top_p = float(probabilities[order[:2]].sum()) - 1e-3  # needs exactly the best two
    nucleus = first_tokens(model, source_row, seed=3, top_p=top_p)
    assert set(nucleus.tolist()) == set(order[:2].tolist())


def test_seeds_reproduce_and_tiny_temperature_is_greedy(model):
    source = make_sources()
    a = as_numpy(sampling_search(model, source, seed=7, max_extra_length=EXTRA))
    b = as_numpy(sampling_search(model, source, seed=7, max_extra_length=EXTRA))
    c = as_numpy(sampling_search(model, np.repeat(source, 8, axis=0), seed=8, max_extra_length=EXTRA))
    np.testing.assert_array_equal(a["ids"], b["ids"])
    assert len({tuple(row) for row in c["ids"].tolist()}) > len(source)  # draws differ
    greedy = as_numpy(greedy_search(model, source, max_extra_length=EXTRA))
    cold = as_numpy(sampling_search(model, source, seed=9, temperature=1e-4, max_extra_length=EXTRA))
    np.testing.assert_array_equal(cold["ids"], greedy["ids"])
    np.testing.assert_allclose(cold["scores"], greedy["scores"], rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_named(model):
    source = make_sources()
    for name, value in [("temperature", 0.0), ("temperature", -1.0), ("top_p", 0.0), ("top_p", 1.5),
                        ("top_k", -1), ("seed", -3)]:
        with pytest.raises(ValueError, match=name):
            sampling_search(model, source, **{name: value})
