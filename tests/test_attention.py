import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt
from keras_transformer.layers.masks import causal_mask, decoder_self_attention_mask, padding_mask
from conftest import to_numpy


def numpy_attention(q, k, v, mask):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(mask, scores, -np.inf)
    scores = scores - scores.max(-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(-1, keepdims=True)
    return weights @ v, weights


def test_scaled_dot_product_attention_matches_formula(rng):
    q, k, v = (rng.normal(size=(2, 3, 5, 4)).astype("float32") for _ in range(3))
    mask = rng.random((2, 1, 5, 5)) > 0.3
    mask[..., 0] = True  # every row keeps a key, so the numpy reference is defined
    layer = kt.ScaledDotProductAttention()
    out, weights = layer(q, k, v, attention_mask=mask, return_attention_weights=True)
    expected_out, expected_weights = numpy_attention(q, k, v, mask)
    np.testing.assert_allclose(to_numpy(out), expected_out, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-6)


def test_masks_combine_padding_and_causal():
    ids = np.array([[5, 6, 7, 0], [8, 0, 0, 0]])
    mask = to_numpy(decoder_self_attention_mask(ids))
    expected = np.tril(np.ones((4, 4), bool))[None] & (ids != 0)[:, None, :]
    np.testing.assert_array_equal(mask, expected)
    np.testing.assert_array_equal(to_numpy(padding_mask(ids)), (ids != 0)[:, None, :])
    # An offset causal mask is the last rows of a longer causal mask.
    np.testing.assert_array_equal(
        to_numpy(causal_mask(2, 6, offset=3)), np.tril(np.ones((6, 6), bool))[3:5]
    )


def test_multi_head_attention_shapes_and_weights(rng):
    layer = kt.MultiHeadAttention(d_model=8, num_heads=2)
    query = rng.normal(size=(3, 4, 8)).astype("float32")
    memory = rng.normal(size=(3, 6, 8)).astype("float32")
    mask = np.ones((3, 1, 6), bool)
    mask[1, :, 3:] = False
    out, weights = layer(query, memory, attention_mask=mask, return_attention_weights=True)
    assert tuple(out.shape) == (3, 4, 8)
    weights = to_numpy(weights)
    assert weights.shape == (3, 2, 4, 6)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(weights[1, :, :, 3:] == 0.0)


def test_multi_head_attention_matches_per_head_reference(rng):
    layer = kt.MultiHeadAttention(d_model=8, num_heads=2)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.tril(np.ones((5, 5), bool))[None]
    out = to_numpy(layer(x, x, attention_mask=mask))

    def dense(d, h):
        return h @ to_numpy(d.kernel) + to_numpy(d.bias)

    q, k, v = dense(layer.query_projection, x), dense(layer.key_projection, x), dense(layer.value_projection, x)
    heads = []
    for h in range(2):
        cols = slice(4 * h, 4 * h + 4)
        heads.append(numpy_attention(q[..., cols], k[..., cols], v[..., cols], mask)[0])
    expected = dense(layer.output_projection, np.concatenate(heads, -1))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_key_dim_shrinks_queries_and_keys_only(rng):
    """d_k = key_dim (3) != d_model / heads (4), d_v stays 4: against numpy
    projections and per-head attention scaled by 1/sqrt(3)."""
    layer = kt.MultiHeadAttention(d_model=8, num_heads=2, key_dim=3)
    query = rng.normal(size=(2, 5, 8)).astype("float32")
    memory = rng.normal(size=(2, 6, 8)).astype("float32")
    mask = rng.random((2, 5, 6)) > 0.3
    mask[..., 0] = True
    out = to_numpy(layer(query, memory, attention_mask=mask))
    assert to_numpy(layer.query_projection.kernel).shape == (8, 6)
    assert to_numpy(layer.key_projection.kernel).shape == (8, 6)
    assert to_numpy(layer.value_projection.kernel).shape == (8, 8)

    def dense(d, h):
        return h @ to_numpy(d.kernel) + to_numpy(d.bias)

    q, k, v = (dense(layer.query_projection, query), dense(layer.key_projection, memory),
               dense(layer.value_projection, memory))
    heads = []
    for h in range(2):
        qk, vv = slice(3 * h, 3 * h + 3), slice(4 * h, 4 * h + 4)
        scores = q[..., qk] @ np.swapaxes(k[..., qk], -1, -2) / np.sqrt(3.0)
        scores = np.where(mask, scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        heads.append(weights @ v[..., vv])
    expected = dense(layer.output_projection, np.concatenate(heads, -1))
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert layer.get_config()["key_dim"] == 3
    assert kt.MultiHeadAttention.from_config(layer.get_config()).key_depth == 3
    with pytest.raises(ValueError, match="key_dim"):
        kt.MultiHeadAttention(d_model=8, num_heads=2, key_dim=0)


def test_d_model_must_divide_into_heads():
    with pytest.raises(ValueError, match="num_heads"):
        kt.MultiHeadAttention(d_model=10, num_heads=3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_fully_masked_rows_are_finite(dtype, rng):
    layer = kt.MultiHeadAttention(d_model=8, num_heads=2, dtype=dtype)
    x = ops.cast(rng.normal(size=(2, 4, 8)) * 10, dtype)
    mask = np.ones((2, 4, 4), bool)
    mask[0] = False  # every key hidden from every query of the first sequence
    mask[1, 2] = False  # one query row of the second sequence sees nothing
    out, weights = layer(x, x, attention_mask=mask, return_attention_weights=True)
    out = to_numpy(ops.cast(out, "float32"))
    weights = to_numpy(ops.cast(weights, "float32"))
    assert np.all(np.isfinite(out)), out
    assert np.all(np.isfinite(weights))
    # Rows with at least one visible key give exactly zero weight to hidden keys.
    assert np.all(weights[1][:, [0, 1, 3]][~np.broadcast_to(mask[1][None, [0, 1, 3]], (2, 3, 4))] == 0)


def test_attention_dropout_only_in_training(rng):
    layer = kt.MultiHeadAttention(d_model=8, num_heads=2, dropout=0.5)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    a = to_numpy(layer(x, x, training=False))
    b = to_numpy(layer(x, x, training=False))
    c = to_numpy(layer(x, x, training=True))
    np.testing.assert_allclose(a, b)
    assert not np.allclose(a, c)
