import keras
import numpy as np
import pytest

import keras_transformer as kt
from conftest import to_numpy


def paper_positional_encoding(length, d_model, start=0):
    """The paper's formula, written out element by element."""
    table = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(d_model // 2):
            angle = (pos + start) / (10000 ** (2 * i / d_model))
            table[pos, 2 * i] = np.sin(angle)
            table[pos, 2 * i + 1] = np.cos(angle)
    return table


@pytest.mark.parametrize("length,d_model", [(7, 16), (300, 32), (5, 512)])
def test_sinusoidal_encoding_matches_paper_formula(length, d_model):
    encoding = kt.SinusoidalPositionalEncoding()(np.zeros((2, length, d_model), "float32"))
    encoding = to_numpy(encoding)
    assert encoding.shape == (2, length, d_model)
    np.testing.assert_allclose(encoding[1], paper_positional_encoding(length, d_model), atol=2e-4)


def test_sinusoidal_encoding_start_index():
    encoding = kt.SinusoidalPositionalEncoding()(np.zeros((1, 3, 8), "float32"), start_index=4)
    np.testing.assert_allclose(to_numpy(encoding)[0], paper_positional_encoding(3, 8, start=4), atol=1e-5)


def test_learned_positional_embedding_slices_its_table():
    layer = kt.LearnedPositionalEmbedding(max_length=10, d_model=4)
    out = to_numpy(layer(np.zeros((2, 3, 4), "float32"), start_index=2))
    table = to_numpy(layer.position_embeddings)
    np.testing.assert_allclose(out[0], table[2:5])
    np.testing.assert_allclose(out[1], table[2:5])


def test_shared_embedding_scales_and_ties_projection(rng):
    layer = kt.SharedEmbedding(vocabulary_size=11, d_model=16)
    ids = np.array([[1, 2, 3], [4, 0, 10]])
    vectors = to_numpy(layer(ids))
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(vectors, table[ids] * 4.0, rtol=1e-6)
    hidden = rng.normal(size=(2, 3, 16)).astype("float32")
    logits = to_numpy(layer(hidden, mode="logits"))
    np.testing.assert_allclose(logits, hidden @ table.T, rtol=1e-5, atol=1e-5)
    assert len(layer.weights) == 1  # one matrix for both directions
    with pytest.raises(ValueError, match="mode"):
        layer(ids, mode="bogus")


def test_feed_forward_is_relu_mlp(rng):
    layer = kt.PositionwiseFeedForward(d_model=6, d_ff=10)
    x = rng.normal(size=(2, 3, 6)).astype("float32")
    out = to_numpy(layer(x))
    w1, b1 = to_numpy(layer.inner.kernel), to_numpy(layer.inner.bias)
    w2, b2 = to_numpy(layer.outer.kernel), to_numpy(layer.outer.bias)
    np.testing.assert_allclose(out, np.maximum(x @ w1 + b1, 0) @ w2 + b2, atol=1e-5)
