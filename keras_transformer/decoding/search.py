"""Greedy and beam search over the model's incremental decoder.

Only search lives here: the searches drive any decoder with the step API of
`keras_transformer.models.incremental` (`initial_state`, `step`, `reorder`;
built by `Transformer.incremental_decoder`), and `compiled.py` compiles them
per backend. Everything is `keras.ops` (loops with `keras.ops.while_loop`),
so it runs under TensorFlow, JAX and PyTorch, and inside a TensorFlow graph
built without autograph or XLA (a SavedModel export): no Python `if`/`while`
on tensors, and every loop variable keeps a fixed shape (pre-allocated
buffers written in place of padding).

Conventions shared by both searches:

- Source ids are (batch, source_length) int ids padded with `pad_id`, as the
  model was trained on (the data pipeline appends EOS to every source).
- A sentence may produce at most `source_length + max_extra_length` tokens,
  where source_length is its own count of non-pad ids (EOS included); the
  output buffer is `padded_source_length + max_extra_length` wide. An optional
  `max_length` caps both. A hypothesis that reaches its limit without EOS is
  finished as it is (truncated, no EOS).
- Reported lengths count the generated tokens *including* EOS, as GNMT and
  tensor2tensor do; the GNMT length penalty uses that length:
  lp = ((5 + length) / 6) ** alpha, score = log P / lp.
- Output ids hold the generated tokens (no BOS), EOS where the hypothesis
  ended, then `pad_id` (0) up to the buffer width.
- `pad_id` and `bos_id` are never generated (their log-probabilities are set
  to -inf, without renormalising); EOS is also forbidden while fewer than
  `min_length` tokens precede it.

Beam search is the standard algorithm of GNMT and tensor2tensor: at each
step the `2 * beam_size` best extensions of the live hypotheses are taken;
those that finish (EOS, or the length limit) enter a separate finished set
(the `beam_size` best by final score), the best `beam_size` others stay live.
A finished hypothesis never competes with live ones for a slot, and the best
finished one is returned. A sentence stops early only when no live
hypothesis can beat the worst kept finished one even under the most
favourable length penalty it could reach (the one at its limit, since log P
only falls): a bound that never changes the result.
"""

import functools
import math

from keras import ops

from keras_transformer.decoding import compiled
from keras_transformer.models.incremental import batch_size_of, write_column

BOS_ID = 2
EOS_ID = 3
PAD_ID = 0

_NEG_INF = float("-inf")


def length_penalty(length, alpha=0.6):
    """GNMT length penalty ((5 + length) / 6) ** alpha (float32, elementwise)."""
    length = ops.cast(length, "float32")
    return ops.power((5.0 + length) / 6.0, ops.cast(alpha, "float32"))


# ---------------------------------------------------------------------------
# Argument checks


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return value


def _check_options(model, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id):
    _check_int("max_extra_length", max_extra_length, 0)
    _check_int("min_length", min_length, 0)
    if max_length is not None:
        _check_int("max_length", max_length, 1)
    vocabulary_size = model.vocabulary_size
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        _check_int(name, value, 0)
        if value >= vocabulary_size:
            raise ValueError(
                f"`{name}`={value} is outside the model's vocabulary of {vocabulary_size} ids."
            )
    if len({bos_id, eos_id, pad_id}) != 3:
        raise ValueError(
            f"`bos_id`, `eos_id` and `pad_id` must differ, got {bos_id}, {eos_id}, {pad_id}."
        )
    if pad_id != model.pad_id:
        raise ValueError(f"`pad_id`={pad_id} differs from the model's pad_id={model.pad_id}.")
    if getattr(model, "positional_encoding", None) == "learned":
        # Learned positions exist only up to the model's max_length.
        max_length = model.max_length if max_length is None else min(max_length, model.max_length)
    return max_length


# ---------------------------------------------------------------------------
# Shared pieces of the searches


def _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_length):
    """Per-sentence output limits (batch,) and the output buffer width."""
    source_lengths = ops.sum(ops.cast(ops.not_equal(source_ids, pad_id), "int32"), axis=1)
    limits = source_lengths + max_extra_length
    width = source_ids.shape[1]
    if width is None:  # a TF graph with an unknown source length
        width = ops.shape(source_ids)[1]
    buffer_length = width + max_extra_length
    if max_length is not None:
        limits = ops.minimum(limits, max_length)
        buffer_length = (
            min(buffer_length, max_length)
            if isinstance(buffer_length, int)
            else ops.minimum(buffer_length, max_length)
        )
    # An empty source with max_extra_length=0 still gets one step (EOS or a token).
    limits = ops.maximum(limits, 1)
    if isinstance(buffer_length, int):
        buffer_length = max(buffer_length, 1)
    else:
        buffer_length = ops.maximum(buffer_length, 1)
    return limits, buffer_length


def _mask_special_tokens(log_probs, ids, step, bos_id, eos_id, pad_id, min_length):
    """-inf where `ids` (broadcast against `log_probs`) is pad or bos, or eos
    while fewer than min_length tokens exist."""
    banned = ops.logical_or(ops.equal(ids, pad_id), ops.equal(ids, bos_id))
    if min_length > 0:
        too_short = ops.logical_and(ops.equal(ids, eos_id), ops.less(step, min_length))
        banned = ops.logical_or(banned, too_short)
    return ops.where(banned, ops.cast(_NEG_INF, "float32"), log_probs)


# Vocabularies at least this large take the blockwise top-k below.
BLOCKWISE_TOP_K_MIN_VOCABULARY = 1024


def _block_length(vocabulary_size):
    """A block length near sqrt(V), a divisor of V if one is close (no padding)."""
    root = math.isqrt(vocabulary_size)
    for size in sorted(range(max(root // 2, 1), 2 * root + 1), key=lambda size: abs(size - root)):
        if vocabulary_size % size == 0:
            return size
    return root


def _top_k_and_logsumexp(logits, k, step, bos_id, eos_id, pad_id, min_length):
    """Per row of (rows, V) float32 logits: the k largest logits of allowed
    tokens (best first, ties to the lower id, as `top_k`), their ids, and
    logsumexp over all V logits.

    Large vocabularies go blockwise: the row is cut into ~sqrt(V) blocks, and
    the k best allowed tokens lie in the k + (number of banned ids) blocks
    with the largest maxima (a block outside them has at least that many
    blocks ahead, each holding a token that ranks above all of its own, of
    which at most the banned ones are excluded). Those blocks, in id order,
    go through an exact top-k. The block maxima also give logsumexp its
    maximum. XLA's CPU top-k over whole rows took ~3.7 ms of a ~25 ms beam
    step (128 rows of 8,000 logits); this reads each row once and runs the
    top-k over ~6% of it.
    """
    vocabulary_size = logits.shape[-1]
    if vocabulary_size < BLOCKWISE_TOP_K_MIN_VOCABULARY:
        vocabulary = ops.arange(vocabulary_size, dtype="int32")
        allowed = _mask_special_tokens(logits, vocabulary, step, bos_id, eos_id, pad_id, min_length)
        values, ids = ops.top_k(allowed, k=k, sorted=True)
        return values, ops.cast(ids, "int32"), ops.logsumexp(logits, axis=-1)
    rows = batch_size_of(logits)
    block = _block_length(vocabulary_size)
    count = -(-vocabulary_size // block)
    padded = logits
    if count * block > vocabulary_size:
        padded = ops.pad(
            logits, [[0, 0], [0, count * block - vocabulary_size]], constant_values=_NEG_INF
        )
    blocks = ops.reshape(padded, (rows, count, block))
    block_maxima = ops.max(blocks, axis=-1)
    row_maxima = ops.max(block_maxima, axis=-1, keepdims=True)
    logsumexp = row_maxima[:, 0] + ops.log(ops.sum(ops.exp(logits - row_maxima), axis=-1))
    banned_count = 3 if min_length > 0 else 2  # pad, bos, and eos while too short
    chosen = min(k + banned_count, count)
    _, block_ids = ops.top_k(block_maxima, k=chosen, sorted=False)
    block_ids = ops.sort(ops.cast(block_ids, "int32"), axis=-1)  # id order: ties as top_k breaks them
    flat_block_ids = block_ids + ops.expand_dims(ops.arange(rows, dtype="int32") * count, 1)
    candidates = ops.take(ops.reshape(blocks, (rows * count, block)), flat_block_ids, axis=0)
    candidate_ids = ops.expand_dims(block_ids * block, -1) + ops.arange(block, dtype="int32")
    candidates = ops.reshape(candidates, (rows, chosen * block))
    candidate_ids = ops.reshape(candidate_ids, (rows, chosen * block))
    candidates = _mask_special_tokens(candidates, candidate_ids, step, bos_id, eos_id, pad_id, min_length)
    values, positions = ops.top_k(candidates, k=k, sorted=True)
    ids = ops.take_along_axis(candidate_ids, ops.cast(positions, "int32"), axis=1)
    return values, ids, logsumexp


# ---------------------------------------------------------------------------
# The searches as plain functions of ops


def _decoder(model, source_ids, beam_size, buffer_length, use_cache, xla_ops):
    return model.incremental_decoder(
        source_ids, beam_size=beam_size, max_length=buffer_length, xla_layout=xla_ops, use_cache=use_cache
    )


def _greedy(
    model, source_ids, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id, use_cache,
    xla_ops=False,
):
    source_ids = ops.cast(source_ids, "int32")
    limits, buffer_length = _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_length)
    decoder = _decoder(model, source_ids, 1, buffer_length, use_cache, xla_ops)
    batch = batch_size_of(source_ids)
    vocabulary = ops.arange(model.vocabulary_size, dtype="int32")

    def cond(step, tokens, last_tokens, finished, scores, lengths, state):
        return ops.logical_and(ops.less(step, buffer_length), ops.logical_not(ops.all(finished)))

    def body(step, tokens, last_tokens, finished, scores, lengths, state):
        logits, state = decoder.step(state, last_tokens, step)
        # log P(token) = logit - logsumexp(logits), over the whole vocabulary.
        normalizer = ops.logsumexp(logits, axis=-1)
        allowed = _mask_special_tokens(logits, vocabulary, step, bos_id, eos_id, pad_id, min_length)
        next_tokens = ops.cast(ops.argmax(allowed, axis=-1), "int32")
        token_logits = ops.take_along_axis(logits, ops.expand_dims(next_tokens, 1), axis=1)[:, 0]
        alive = ops.logical_not(finished)
        next_tokens = ops.where(alive, next_tokens, pad_id)
        scores = scores + ops.where(alive, token_logits - normalizer, 0.0)
        lengths = lengths + ops.cast(alive, "int32")
        tokens = write_column(tokens, step, next_tokens)
        finished = ops.logical_or(
            finished,
            ops.logical_or(ops.equal(next_tokens, eos_id), ops.greater_equal(step + 1, limits)),
        )
        return step + 1, tokens, next_tokens, finished, scores, lengths, state

    loop_state = (
        ops.convert_to_tensor(0, dtype="int32"),
        ops.zeros((batch, buffer_length), dtype="int32"),
        ops.full((batch,), bos_id, dtype="int32"),
        ops.zeros((batch,), dtype="bool"),
        ops.zeros((batch,), dtype="float32"),
        ops.zeros((batch,), dtype="int32"),
        decoder.initial_state,
    )
    _, tokens, _, _, scores, lengths, _ = ops.while_loop(cond, body, loop_state)
    return {"ids": tokens, "scores": scores, "log_probs": scores, "lengths": lengths}


def _take_rows(x, indices):
    """x[b, indices[b, j]] for (batch, n, ...) `x` and (batch, m) `indices`."""
    indices = ops.cast(indices, "int32")
    for _ in range(len(x.shape) - 2):
        indices = ops.expand_dims(indices, -1)
    return ops.take_along_axis(x, indices, axis=1)


def _beam(
    model, source_ids, beam_size, alpha, max_extra_length, max_length, min_length,
    bos_id, eos_id, pad_id, use_cache, return_all_beams, xla_ops=False,
):
    source_ids = ops.cast(source_ids, "int32")
    limits, buffer_length = _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_length)
    decoder = _decoder(model, source_ids, beam_size, buffer_length, use_cache, xla_ops)
    batch = batch_size_of(source_ids)
    rows = batch * beam_size
    vocabulary_size = model.vocabulary_size
    neg_inf = ops.cast(_NEG_INF, "float32")
    # 2 * beam_size extensions per sentence: at most beam_size of them end
    # with EOS (one per live beam), so at least beam_size stay live. The best
    # of a sentence are among the best `per_row` tokens of each of its beams
    # (the beam's log P is constant along its row): a top-k per row, then
    # one over the beam * per_row candidates.
    per_row = min(2 * beam_size, vocabulary_size)
    width = min(2 * beam_size, beam_size * per_row)
    # The most favourable penalty a live hypothesis can still get: the one at its limit.
    best_penalty = length_penalty(limits, alpha)
    limits = ops.expand_dims(limits, 1)  # (batch, 1) against (batch, candidates)
    row_offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * beam_size, 1)
    # Flat index of (beam, token) in a sentence's beam * vocabulary extensions.
    beam_offsets = ops.reshape(
        ops.tile(ops.arange(beam_size, dtype="int32") * vocabulary_size, (batch,)), (rows, 1)
    )

    def cond(step, live_tokens, last_tokens, live_log_probs, finished_tokens, finished_scores,
             finished_log_probs, finished_lengths, done, state):
        return ops.logical_and(ops.less(step, buffer_length), ops.logical_not(ops.all(done)))

    def body(step, live_tokens, last_tokens, live_log_probs, finished_tokens, finished_scores,
             finished_log_probs, finished_lengths, done, state):
        logits, state = decoder.step(state, last_tokens, step)
        row_values, row_indices, normalizers = _top_k_and_logsumexp(
            logits, per_row, step, bos_id, eos_id, pad_id, min_length
        )
        # A sentence that is done extends nothing (its dead beams are -inf already).
        live = ops.where(ops.expand_dims(done, 1), neg_inf, live_log_probs)
        offsets = ops.reshape(live, (rows,)) - normalizers
        candidates = ops.reshape(row_values + ops.expand_dims(offsets, 1), (batch, beam_size * per_row))
        candidate_ids = ops.reshape(row_indices + beam_offsets, (batch, beam_size * per_row))
        log_probs, positions = ops.top_k(candidates, k=width, sorted=True)
        flat_ids = ops.take_along_axis(candidate_ids, ops.cast(positions, "int32"), axis=1)
        parents = flat_ids // vocabulary_size
        tokens = flat_ids % vocabulary_size
        ends = ops.logical_or(ops.equal(tokens, eos_id), ops.greater_equal(step + 1, limits))
        # Every candidate's whole hypothesis: its parent's tokens and this one.
        parent_rows = row_offsets + parents  # (batch, width)
        hypotheses = ops.take(live_tokens, ops.reshape(parent_rows, (-1,)), axis=0)
        hypotheses = write_column(hypotheses, step, ops.reshape(tokens, (-1,)))
        hypotheses = ops.reshape(hypotheses, (batch, width, -1))

        # Finished: the best beam_size of the kept ones and those ending now
        # (ties keep the earlier ones, which come first).
        ending_scores = ops.where(ends, log_probs / length_penalty(step + 1, alpha), neg_inf)
        pooled_scores = ops.concatenate([finished_scores, ending_scores], axis=1)
        finished_scores, picks = ops.top_k(pooled_scores, k=beam_size, sorted=True)
        finished_tokens = _take_rows(ops.concatenate([finished_tokens, hypotheses], axis=1), picks)
        finished_log_probs = _take_rows(
            ops.concatenate([finished_log_probs, ops.where(ends, log_probs, neg_inf)], axis=1), picks
        )
        ending_lengths = ops.broadcast_to(ops.reshape(step + 1, (1, 1)), ops.shape(tokens))
        finished_lengths = _take_rows(ops.concatenate([finished_lengths, ending_lengths], axis=1), picks)

        # Live: the best beam_size of those that do not end.
        live_log_probs, picks = ops.top_k(ops.where(ends, neg_inf, log_probs), k=beam_size, sorted=True)
        live_rows = ops.reshape(_take_rows(parent_rows, picks), (rows,))
        last_tokens = ops.reshape(_take_rows(tokens, picks), (rows,))
        live_tokens = ops.reshape(_take_rows(hypotheses, picks), (rows, -1))
        state = decoder.reorder(state, live_rows)

        # Done when no live hypothesis can beat the worst kept finished one
        # (-inf while fewer than beam_size have finished), or at the limit.
        bound = live_log_probs[:, 0] / best_penalty
        done = ops.logical_or(done, ops.greater_equal(finished_scores[:, -1], bound))
        done = ops.logical_or(done, ops.greater_equal(step + 1, limits[:, 0]))
        return (step + 1, live_tokens, last_tokens, live_log_probs, finished_tokens, finished_scores,
                finished_log_probs, finished_lengths, done, state)

    # Only the first beam is live at the start, so the first step's
    # candidates hold distinct tokens.
    first_beam = ops.equal(ops.arange(beam_size, dtype="int32"), 0)
    initial = ops.broadcast_to(ops.expand_dims(ops.where(first_beam, 0.0, neg_inf), 0), (batch, beam_size))
    empty = ops.full((batch, beam_size), neg_inf, dtype="float32")
    loop_state = (
        ops.convert_to_tensor(0, dtype="int32"),
        ops.zeros((rows, buffer_length), dtype="int32"),
        ops.full((rows,), bos_id, dtype="int32"),
        initial,
        ops.zeros((batch, beam_size, buffer_length), dtype="int32"),
        empty,
        empty,
        ops.zeros((batch, beam_size), dtype="int32"),
        ops.zeros((batch,), dtype="bool"),
        decoder.initial_state,
    )
    results = ops.while_loop(cond, body, loop_state)
    tokens, scores, log_probs, lengths = results[4:8]
    # Slots no hypothesis ever filled (a vocabulary smaller than the beam)
    # score -inf and hold no tokens.
    filled = ops.greater(scores, neg_inf)
    tokens = ops.where(ops.expand_dims(filled, -1), tokens, pad_id)
    lengths = ops.where(filled, lengths, 0)
    if return_all_beams:
        return {"ids": tokens, "scores": scores, "log_probs": log_probs, "lengths": lengths}
    return {
        "ids": tokens[:, 0],
        "scores": scores[:, 0],
        "log_probs": log_probs[:, 0],
        "lengths": lengths[:, 0],
    }


# ---------------------------------------------------------------------------
# Public API


def greedy_search(
    model,
    source_ids,
    *,
    max_extra_length=50,
    max_length=None,
    min_length=0,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    use_cache=True,
    compile=True,
    jit_compile=False,
):
    """Greedy decoding: the most probable token at every step.

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: (batch, source_length) int ids padded with `pad_id`.
        max_extra_length: a sentence stops after its non-pad source length
            plus this many tokens.
        max_length: optional cap on every output length (and on the buffer).
        min_length: forbid EOS until this many tokens were generated (the
            benchmark uses it to force a fixed number of steps).
        bos_id, eos_id, pad_id: special ids (those of `SubwordTokenizer`).
        use_cache: False re-runs the whole decoder at every step (slow; a
            reference for tests and benchmarks).
        compile: compile the whole search (`tf.function` / `jax.jit`); the
            compiled function is kept per model and options.
        jit_compile: on TensorFlow, compile with XLA (faster on CPU; not for
            SavedModels served by TF Serving, which runs without XLA). Inside
            a caller's graph, True emits XLA-only ops (the caller must
            compile with XLA).

    Returns:
        A dict of tensors: "ids" (batch, buffer_length) int32, the tokens
        with EOS and then `pad_id`; "scores" and "log_probs" (batch,) the sum
        of the tokens' log-probabilities; "lengths" (batch,) tokens generated,
        EOS included.
    """
    max_length = _check_options(model, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id)

    search = functools.partial(
        _greedy, max_extra_length=max_extra_length, max_length=max_length, min_length=min_length,
        bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, use_cache=use_cache,
        xla_ops=bool(jit_compile),
    )

    key = ("greedy", max_extra_length, max_length, min_length, bos_id, eos_id, pad_id, use_cache, jit_compile)
    return compiled.run(model, source_ids, key, search, compile, jit_compile)


def beam_search(
    model,
    source_ids,
    *,
    beam_size=4,
    alpha=0.6,
    max_extra_length=50,
    max_length=None,
    min_length=0,
    return_all_beams=False,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    use_cache=True,
    compile=True,
    jit_compile=False,
):
    """Beam search with the GNMT length penalty (the paper's setting: 4 beams, alpha 0.6).

    Hypotheses are ranked by log P / ((5 + length) / 6) ** alpha, the length
    counting EOS. The standard algorithm (GNMT, tensor2tensor): `beam_size`
    live hypotheses drawn from the `2 * beam_size` best extensions at each
    step, finished ones kept in a separate set of the `beam_size` best, the
    best finished one returned (see the module docstring for early stopping).

    Arguments as for `greedy_search`, plus:
        beam_size: number of beams.
        alpha: length penalty exponent (0: plain log-probability).
        return_all_beams: return the kept finished hypotheses, best first,
            instead of the best one.

    Returns:
        A dict of tensors: "ids" (batch, buffer_length) int32 (with
        `return_all_beams`, (batch, beam_size, buffer_length)); "scores" the
        length-penalised scores; "log_probs" the sums of log-probabilities;
        "lengths" tokens generated, EOS included. Slots of the finished set
        that no hypothesis filled score -inf, with no tokens and length 0.
    """
    max_length = _check_options(model, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id)
    _check_int("beam_size", beam_size, 1)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"`alpha` must be a finite number >= 0, got {alpha!r}.")
    alpha = float(alpha)

    search = functools.partial(
        _beam, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length,
        max_length=max_length, min_length=min_length, return_all_beams=return_all_beams,
        bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, use_cache=use_cache,
        xla_ops=bool(jit_compile),
    )

    key = (
        "beam", beam_size, alpha, max_extra_length, max_length, min_length, return_all_beams,
        bos_id, eos_id, pad_id, use_cache, jit_compile,
    )
    return compiled.run(model, source_ids, key, search, compile, jit_compile)
