"""The candidates of a step when n-gram blocking bans tokens: the blockwise
top-k over the allowed logits (a batch of rows with fewer than k allowed
tokens goes to the plain path) against a stable sort of whole rows written
here in numpy (backend-agnostic: run under tensorflow, jax and torch)."""

import keras
import numpy as np
import pytest

from conftest import to_numpy
from keras_transformer.decoding import candidates as candidates_module

PAD, BOS, EOS = 0, 2, 3


def reference_candidates(logits, banned, k, step, min_length):
    """What the candidates of a step must be, by a stable sort of whole rows:
    ids and values of the k best tokens neither banned nor special (ties and
    -inf fillers in id order), EOS allowed again in a row left with no finite
    token, and logsumexp over every logit."""
    allowed = np.where(banned, -np.inf, logits)
    allowed[:, [PAD, BOS]] = -np.inf
    if step < min_length:
        allowed[:, EOS] = -np.inf
    none_left = ~np.isfinite(allowed).any(axis=1)
    allowed[none_left, EOS] = logits[none_left, EOS]
    ids = np.argsort(-allowed, axis=1, kind="stable")[:, :k]
    peak = logits.max(1, keepdims=True)
    normalizers = peak[:, 0] + np.log(np.exp(logits.astype("float64") - peak).sum(1))
    return np.take_along_axis(allowed, ids, axis=1), ids, normalizers


def compiled_on_this_backend(function):
    """`function` as the searches run it: a TF graph under XLA, jax.jit, or eager PyTorch."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, autograph=False, jit_compile=True)
    if backend == "jax":
        import jax

        return jax.jit(function)
    return function


# A prime (padded blocks) with EOS banned while too short, and blocks of 80.
@pytest.mark.parametrize("vocabulary_size, min_length", [(1031, 3), (8000, 0)])
def test_blockwise_top_k_with_bans_equals_a_full_sort(vocabulary_size, min_length):
    """n-gram blocking's bans (logits set to -inf) on the blockwise path: the
    rows of `rich` keep at least k allowed tokens (the blockwise top-k is
    exact there and `_blockwise_top_k` must match alone); each row of `short`
    has fewer, which sends its batch to the plain path over whole rows."""
    k, step = 4, 1
    rng = np.random.default_rng(vocabulary_size + min_length)
    block = candidates_module._block_length(vocabulary_size)
    rich = rng.normal(size=(5, vocabulary_size)).astype("float32")
    rich_banned = np.zeros(rich.shape, bool)
    rich[0, [5, 700, 1000]] = 9.0  # a tie across blocks, its middle banned
    rich_banned[0, 700] = True
    rich[1, 100:112] = 200.0  # the 12 best tokens banned, far above the rest (logsumexp's maximum)
    rich_banned[1, 100:112] = True
    rich[2] = np.round(rich[2])  # ties everywhere, half of the best ones banned
    rich_banned[2] = (rich[2] == rich[2].max()) & (rng.random(vocabulary_size) < 0.5)
    rich[3, -4:] = 12.0  # the best tokens in the last (padded) block, two of them banned
    rich_banned[3, [-1, -3]] = True
    rich[4, 3 * block : 4 * block] = 15.0  # a whole block of the best tokens banned
    rich_banned[4, 3 * block : 4 * block] = True
    short = np.full((5, vocabulary_size), -np.inf, "float32")  # as many rows: one compiled shape
    short_banned = np.zeros(short.shape, bool)
    short[0, [EOS, 40, 41, 42]] = [1.0, 2.0, 2.0, 3.0]  # two tokens left: -inf fillers
    short_banned[0, [41, 42]] = True
    short[1, [EOS, 50, 51]] = [-1.0, 4.0, 5.0]  # every token but EOS banned
    short_banned[1, [50, 51]] = True
    short[2:] = rng.normal(size=(3, vocabulary_size))  # full rows, in a batch that takes the plain path
    short_banned[2:, :10] = True

    def candidates(logits, allowed):
        return candidates_module._top_k_and_logsumexp(
            logits, k, keras.ops.convert_to_tensor(step, "int32"), bos_id=BOS, eos_id=EOS, pad_id=PAD,
            min_length=min_length, allowed=allowed,
        )

    def blockwise(allowed):
        return candidates_module._blockwise_top_k(
            allowed, k, keras.ops.convert_to_tensor(step, "int32"), bos_id=BOS, eos_id=EOS, pad_id=PAD,
            min_length=min_length,
        )[:2]

    compiled = compiled_on_this_backend(candidates)
    for logits, banned in ((rich, rich_banned), (short, short_banned)):
        expected = reference_candidates(logits, banned, k, step, min_length)
        as_tensors = [keras.ops.convert_to_tensor(x) for x in (logits, np.where(banned, -np.inf, logits))]
        found = [candidates(*as_tensors)]
        if logits is rich:
            found.append(blockwise(as_tensors[1]))
        if vocabulary_size == 1031:  # compiling costs seconds: once is enough
            found.append(compiled(*as_tensors))
        for result in found:
            np.testing.assert_array_equal(to_numpy(result[1]), expected[1])
            np.testing.assert_array_equal(to_numpy(result[0]), expected[0])
            if len(result) == 3:
                np.testing.assert_allclose(to_numpy(result[2]), expected[2], rtol=1e-6, atol=1e-5)
