"""The candidates of a step: which tokens are allowed (special tokens,
min_length, a row left without candidates, EOS forced at the limit) and the
k best allowed ones with the normaliser (blockwise for large vocabularies).
`keras.ops` only."""

import math

import keras
from keras import ops

from keras_transformer.models.incremental import batch_size_of

_NEG_INF = float("-inf")


def top_k(x, k):
    """(values, indices) of the k largest entries of each row, best first,
    equal values in index order (the earlier first) on every backend: the
    searches' tie rule. `torch.topk` keeps no such order, so under PyTorch
    a stable sort of the negated row gives it (pad ids' -inf included)."""
    if keras.backend.backend() == "torch":
        return _stable_top_k(x, k)
    values, indices = ops.top_k(x, k=k, sorted=True)
    return values, ops.cast(indices, "int32")


def _stable_top_k(x, k):
    """`top_k` with ties in index order, from `torch.topk` and sorts of k
    entries: a stable argsort of whole (rows, V) rows cost ~30 ms a beam step
    (128 rows of 8,000), the plain path n-gram blocking takes. The k-th
    largest value is the threshold: every entry above it is in, and of the
    entries equal to it, the earliest ones, as many as are still needed."""
    width = ops.shape(x)[-1]
    threshold = ops.top_k(x, k=k, sorted=True)[0][..., -1:]
    above = ops.greater(x, threshold)
    tied = ops.equal(x, threshold)
    needed = k - ops.sum(ops.cast(above, "int32"), axis=-1, keepdims=True)
    earliest = ops.less_equal(ops.cumsum(ops.cast(tied, "int32"), axis=-1), needed)
    chosen = ops.logical_or(above, ops.logical_and(tied, earliest))  # exactly k a row
    # The chosen positions in index order (distinct keys: torch.topk's order is exact).
    positions = ops.arange(width, dtype="float32")
    keys = ops.where(chosen, ops.cast(width, "float32") - positions, -1.0)
    indices = ops.cast(ops.top_k(keys, k=k, sorted=True)[1], "int32")
    values = ops.take_along_axis(x, indices, axis=-1)
    order = ops.argsort(ops.negative(values), axis=-1)  # stable over k entries: ties keep index order
    return ops.take_along_axis(values, order, axis=-1), ops.take_along_axis(indices, order, axis=-1)


def _mask_special_tokens(log_probs, ids, step, bos_id, eos_id, pad_id, min_length):
    """-inf where `ids` (broadcast against `log_probs`) is pad or bos, or eos
    while fewer than min_length tokens exist."""
    banned = ops.logical_or(ops.equal(ids, pad_id), ops.equal(ids, bos_id))
    if min_length > 0:
        too_short = ops.logical_and(ops.equal(ids, eos_id), ops.less(step, min_length))
        banned = ops.logical_or(banned, too_short)
    return ops.where(banned, ops.cast(_NEG_INF, "float32"), log_probs)


def _keep_a_candidate(allowed, logits, eos_id):
    """`allowed` logits (rows, V), with EOS allowed again in rows where
    bans left no token at all (blocking with min_length in a small
    vocabulary): banning never leaves a row without a finite candidate."""
    vocabulary = ops.arange(ops.shape(logits)[-1], dtype="int32")
    none_left = ops.logical_not(ops.any(ops.greater(allowed, _NEG_INF), axis=-1, keepdims=True))
    reopen = ops.logical_and(none_left, ops.equal(ops.expand_dims(vocabulary, 0), eos_id))
    return ops.where(reopen, logits, allowed)


def _eos_only(allowed, logits, at_limit, eos_id):
    """Rows of `allowed` (rows, V) where `at_limit` (rows,) allow EOS alone,
    at its model logit ("force_eos")."""
    vocabulary = ops.arange(ops.shape(logits)[-1], dtype="int32")
    eos_logits = ops.where(ops.equal(ops.expand_dims(vocabulary, 0), eos_id), logits, _NEG_INF)
    return ops.where(ops.expand_dims(at_limit, 1), eos_logits, allowed)


# Vocabularies at least this large take the blockwise top-k below.
BLOCKWISE_TOP_K_MIN_VOCABULARY = 1024


def _block_length(vocabulary_size):
    """A block length near sqrt(V), a divisor of V if one is close (no padding)."""
    root = math.isqrt(vocabulary_size)
    for size in sorted(range(max(root // 2, 1), 2 * root + 1), key=lambda size: abs(size - root)):
        if vocabulary_size % size == 0:
            return size
    return root


def _top_k_and_logsumexp(logits, k, step, bos_id, eos_id, pad_id, min_length, allowed=None):
    """Per row of (rows, V) float32 logits: the k largest logits of allowed
    tokens (best first, ties to the lower id, as `top_k`), their ids, and
    logsumexp over all V logits. `allowed` (from `_Constraints.allowed`):
    the logits with -inf at the tokens constraints ban; banning never leaves
    a row without a finite candidate (EOS is allowed again).

    Large vocabularies go blockwise (`_blockwise_top_k`), with bans too:
    where it cannot be exact, a row with fewer than k allowed tokens, the
    whole batch takes the plain path over full rows.
    """
    constrained = allowed is not None
    allowed = logits if allowed is None else allowed
    if logits.shape[-1] < BLOCKWISE_TOP_K_MIN_VOCABULARY:
        values, ids = _plain_top_k(allowed, logits, k, step, bos_id, eos_id, pad_id, min_length, constrained)
        return values, ids, ops.logsumexp(logits, axis=-1)
    values, ids, row_maxima = _blockwise_top_k(allowed, k, step, bos_id, eos_id, pad_id, min_length)
    if constrained:
        row_maxima = ops.max(logits, axis=-1, keepdims=True)  # banned logits count in logsumexp
        # k finite values: the k best allowed tokens lie in the chosen
        # blocks, as without bans. Fewer: the -inf fillers and EOS reopened
        # (`_keep_a_candidate`) need whole rows.
        short = ops.any(ops.equal(values[:, -1], _NEG_INF))
        values, ids = ops.cond(
            short,
            lambda: _plain_top_k(allowed, logits, k, step, bos_id, eos_id, pad_id, min_length, True),
            lambda: (values, ids),
        )
    logsumexp = row_maxima[:, 0] + ops.log(ops.sum(ops.exp(logits - row_maxima), axis=-1))
    return values, ids, logsumexp


def _plain_top_k(allowed, logits, k, step, bos_id, eos_id, pad_id, min_length, constrained):
    """`top_k` over whole rows of `allowed`, special tokens masked."""
    vocabulary = ops.arange(logits.shape[-1], dtype="int32")
    allowed = _mask_special_tokens(allowed, vocabulary, step, bos_id, eos_id, pad_id, min_length)
    if constrained:
        allowed = _keep_a_candidate(allowed, logits, eos_id)
    return top_k(allowed, k)


def _blockwise_top_k(allowed, k, step, bos_id, eos_id, pad_id, min_length):
    """(values, ids, row maxima (rows, 1)) of `_plain_top_k` for rows with
    at least k allowed tokens, without a top-k over whole rows.

    The row is cut into ~sqrt(V) blocks, and the k best allowed tokens lie
    in the k + (number of special tokens masked) blocks with the largest
    maxima (a block outside them has at least that many blocks ahead, each
    holding a token that ranks above all of its own, of which at most the
    special ones are excluded; tokens banned by constraints are -inf in
    `allowed` already, so they count in no maximum). Those blocks, in id
    order, go through an exact top-k. The block maxima also give the row
    maxima. XLA's CPU top-k over whole rows took ~3.7 ms of a ~25 ms beam
    step (128 rows of 8,000 logits); this reads each row once and runs the
    top-k over ~6% of it.
    """
    vocabulary_size = allowed.shape[-1]
    rows = batch_size_of(allowed)
    block = _block_length(vocabulary_size)
    count = -(-vocabulary_size // block)
    padded = allowed
    if count * block > vocabulary_size:
        padded = ops.pad(
            allowed, [[0, 0], [0, count * block - vocabulary_size]], constant_values=_NEG_INF
        )
    blocks = ops.reshape(padded, (rows, count, block))
    block_maxima = ops.max(blocks, axis=-1)
    row_maxima = ops.max(block_maxima, axis=-1, keepdims=True)
    masked_count = 3 if min_length > 0 else 2  # pad, bos, and eos while too short
    chosen = min(k + masked_count, count)
    _, block_ids = top_k(block_maxima, chosen)  # stable: of tied blocks, the earlier
    block_ids = ops.sort(ops.cast(block_ids, "int32"), axis=-1)  # id order: ties as top_k breaks them
    flat_block_ids = block_ids + ops.expand_dims(ops.arange(rows, dtype="int32") * count, 1)
    candidates = ops.take(ops.reshape(blocks, (rows * count, block)), flat_block_ids, axis=0)
    candidate_ids = ops.expand_dims(block_ids * block, -1) + ops.arange(block, dtype="int32")
    candidates = ops.reshape(candidates, (rows, chosen * block))
    candidate_ids = ops.reshape(candidate_ids, (rows, chosen * block))
    candidates = _mask_special_tokens(candidates, candidate_ids, step, bos_id, eos_id, pad_id, min_length)
    values, positions = top_k(candidates, k)
    ids = ops.take_along_axis(candidate_ids, ops.cast(positions, "int32"), axis=1)
    return values, ids, row_maxima
