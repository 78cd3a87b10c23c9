"""Greedy and beam search over the Transformer's cached decoder.

Everything here is written with `keras.ops` (loops with `keras.ops.while_loop`),
so it runs under the TensorFlow, JAX and PyTorch backends and inside a
TensorFlow graph built without autograph or XLA (a SavedModel export): no
Python `if`/`while` on tensors, and every loop variable keeps a fixed shape
(pre-allocated buffers written in place of padding).

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
- Finished hypotheses are kept and never extended: a finished beam competes
  with the extensions of live beams under its final score, and the search
  stops as soon as every beam of every sentence has finished.

Beams are flattened into the batch (row b * beam_size + k). The decoder's
keys and values are never reordered: each beam writes its step's entries into
its own slot of a shared per-sentence cache, attends over every slot's entries,
and a mask keeps the ones on its own hypothesis's path (the slot history, a
small int tensor, is all that follows a beam to its new parent). The
encoder and the cross-attention keys/values are computed once per call. The
caches are laid out for search (one (rows, heads, length, depth) tensor per
layer for keys and one for values, see `_CachedStepper`) rather than through
`model.decode(self_attention_cache=...)`, whose generic stacked layout costs
transposes and copies at every step; `use_cache=False` re-runs
`model.decode` on the whole prefix instead, the reference the tests compare
against.

Both searches compile the whole loop where the backend allows: a
`tf.function` (optionally `jit_compile=True`, XLA) on TensorFlow, `jax.jit` on
JAX; PyTorch runs eagerly under `torch.no_grad()`. When called while a
TensorFlow graph or a JAX trace is being built (e.g. inside an export
function) they emit plain ops into it.
"""

import functools
import itertools
import math
import weakref

import keras
from keras import ops

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


def _check_source(source_ids):
    if len(source_ids.shape) != 2:
        raise ValueError(
            f"`source_ids` must be a 2-D (batch, source_length) array of ids, "
            f"got shape {tuple(source_ids.shape)}."
        )


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


def _batch_size(x):
    size = x.shape[0]
    return ops.shape(x)[0] if size is None else size


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
    rows = _batch_size(logits)
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


def _write_column(buffer, column, values):
    """buffer[:, column] = values without slice_update (no XLA-only op on TF)."""
    width = ops.shape(buffer)[1]
    at_column = ops.equal(ops.arange(width, dtype="int32"), column)
    return ops.where(ops.expand_dims(at_column, 0), ops.expand_dims(values, 1), buffer)


def _repeat_rows(x, repeats):
    return ops.repeat(x, repeats, axis=0) if repeats > 1 else x


class _CachedStepper:
    """One decoder position per step, with per-layer key/value caches.

    The model's own layers do the work (`DecoderLayer._residual` for the
    post-/pre-LN wiring, the projections, `ScaledDotProductAttention`, the
    feed-forward network, the tied output projection); only the cache layout
    is specific to search: one (batch, heads, buffer_length * beams, depth)
    tensor per layer for keys and one for values (under XLA the keys are
    stored (batch, heads, depth, buffer_length * beams), see `__init__`), where
    entry `position * beams + slot` holds what the beam in `slot` wrote at
    `position`. Keys and values are then consumed by the attention without
    the transposes and stacking that the model's generic
    (batch, 2, length, heads, depth) cache needs at every step. Beam search
    never moves them: a beam that continues another inherits its slot history
    ((rows, buffer_length) ints: which slot wrote each position of the
    hypothesis), and its self-attention mask admits exactly those entries.
    Attending over all beams' entries costs beam_size x the (small)
    attention FLOPs of one step, and saves copying every cache at every step.
    The cross-attention keys and values are projected once per sentence and
    shared by its beams. Tests check that this reproduces `model.decode` on
    the whole prefix.

    `xla_ops`: write the cache with `slice_update` (an in-place
    dynamic-update-slice under XLA and JAX). TensorFlow lowers it to
    `XlaDynamicUpdateSlice`, which needs XLA, so the graph path (exports for
    TF Serving) writes with a scatter instead.
    """

    def __init__(self, model, source_ids, repeats, buffer_length, xla_ops):
        self.model = model
        self.layers = list(model.decoder.stacked_layers)
        self.xla_ops = xla_ops or keras.backend.backend() != "tensorflow"
        self.buffer_length = buffer_length
        self.beams = repeats
        self.batch = _batch_size(source_ids)
        # Under XLA, keys are kept as (..., depth, length): XLA's CPU dot
        # reads them about twice as fast as (..., length, depth) operands
        # that it must transpose (attention is then handed
        # `swapaxes(keys)`, and the two transposes cancel). The TF graph
        # path keeps (..., length, depth), where the scatter writes rows.
        self.keys_transposed = self.xla_ops
        memory = model.encode(source_ids, training=False)
        rows = self.batch * repeats
        source_length = ops.shape(source_ids)[1]
        # Cross-attention runs per sentence: its beams are the query rows of
        # one (heads, beams, depth) block against the sentence's keys, which
        # are stored once instead of once per beam.
        self.source_mask = ops.reshape(
            ops.not_equal(source_ids, model.pad_id), (self.batch, 1, 1, source_length)
        )
        self.cross = []
        for layer in self.layers:
            attention = layer.cross_attention
            keys = self._heads(attention, attention.key_projection(memory))
            values = self._heads(attention, attention.value_projection(memory))
            if self.keys_transposed:
                keys = ops.swapaxes(keys, -1, -2)
            self.cross.append((keys, values))
        # One matmul for the query, key and value projections of each step.
        self.fused_projections = [self._fuse(layer.self_attention) for layer in self.layers]
        first = self.layers[0].self_attention
        # Keys/values of position p written by the beam in physical slot j sit
        # at p * beams + j: the entries of one step are contiguous.
        value_shape = (self.batch, first.num_heads, buffer_length * repeats, first.depth)
        key_shape = value_shape
        if self.keys_transposed:
            key_shape = (self.batch, first.num_heads, first.depth, buffer_length * repeats)
        dtype = first.compute_dtype
        self.initial_cache = ()
        for _ in self.layers:
            self.initial_cache += (ops.zeros(key_shape, dtype=dtype), ops.zeros(value_shape, dtype=dtype))
        if repeats > 1:
            # Which slot holds each position of each beam's hypothesis.
            self.initial_cache += (ops.zeros((rows, buffer_length), dtype="int32"),)
            self.own_slot = ops.tile(ops.arange(repeats, dtype="int32"), (self.batch,))
            self.slots = ops.arange(repeats, dtype="int32")
        if not self.xla_ops:
            # (sentence, head, slot) coordinates of every cache entry written per step.
            grid = ops.meshgrid(
                ops.arange(self.batch, dtype="int32"),
                ops.arange(first.num_heads, dtype="int32"),
                ops.arange(repeats, dtype="int32"),
                indexing="ij",
            )
            self.write_indices = ops.reshape(ops.stack(grid, axis=-1), (-1, 3))

    @staticmethod
    def _fuse(attention):
        """(kernel, bias) of the concatenated query/key/value projections, or None."""
        denses = (attention.query_projection, attention.key_projection, attention.value_projection)
        for dense in denses:
            # Quantized or LoRA layers compute their kernels differently: call them.
            if getattr(dense, "quantization_mode", None) or getattr(dense, "lora_enabled", False):
                return None
        dtype = attention.compute_dtype
        kernel = ops.concatenate([ops.cast(d.kernel, dtype) for d in denses], axis=1)
        bias = None
        if attention.use_bias:
            bias = ops.concatenate([ops.cast(d.bias, dtype) for d in denses], axis=0)
        return kernel, bias

    def _project_query_key_value(self, index, attention, h):
        fused = self.fused_projections[index]
        if fused is None:
            return (attention.query_projection(h), attention.key_projection(h), attention.value_projection(h))
        kernel, bias = fused
        projected = ops.matmul(h, kernel)
        if bias is not None:
            projected = projected + bias
        width = attention.d_model
        return projected[..., :width], projected[..., width : 2 * width], projected[..., 2 * width :]

    @staticmethod
    def _heads(attention, x):
        """(rows, length, d_model) -> (rows, heads, length, depth)."""
        return ops.transpose(attention.split_heads(x), (0, 2, 1, 3))

    def _step_heads(self, attention, x):
        """(rows, 1, d_model) -> (batch, heads, beams, depth): one step of every beam."""
        x = ops.reshape(x, (self.batch, self.beams, attention.num_heads, attention.depth))
        return ops.transpose(x, (0, 2, 1, 3))

    def _merge_step_heads(self, attention, x):
        """(batch, heads, beams, depth) -> (rows, 1, d_model)."""
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (self.batch * self.beams, 1, attention.d_model))

    def _write(self, cache, new, step, transposed=False):
        """cache[:, :, step * beams + slot] = new[:, :, slot] for every slot, or
        cache[:, :, :, step * beams + slot] = new[:, :, slot] into a `transposed`
        (batch, heads, depth, entries) cache."""
        if transposed:
            return ops.slice_update(cache, [0, 0, 0, step * self.beams], ops.swapaxes(new, -1, -2))
        if self.xla_ops:
            return ops.slice_update(cache, [0, 0, step * self.beams, 0], new)
        count = ops.shape(self.write_indices)[0]
        position = self.write_indices[:, 2:] + step * self.beams
        indices = ops.concatenate([self.write_indices[:, :2], position], axis=1)
        return ops.scatter_update(cache, indices, ops.reshape(new, (count, ops.shape(new)[-1])))

    def _keys_for_attention(self, keys):
        """Keys as attention takes them, (..., length, depth)."""
        return ops.swapaxes(keys, -1, -2) if self.keys_transposed else keys

    def _self_attention_mask(self, step, caches):
        """Which cache entries each beam sees, (batch, 1, beams, buffer * beams), and
        the updated slot history."""
        positions = ops.arange(self.buffer_length, dtype="int32")
        written = ops.less_equal(positions, step)
        if self.beams == 1:
            return ops.reshape(written, (1, 1, 1, -1)), ()
        history = _write_column(caches[-1], step, self.own_slot)  # (rows, buffer)
        own = ops.equal(ops.expand_dims(history, -1), self.slots)  # (rows, buffer, beams)
        visible = ops.logical_and(own, ops.reshape(written, (1, -1, 1)))
        return ops.reshape(visible, (self.batch, 1, self.beams, -1)), (history,)

    def __call__(self, step, last_tokens, tokens, caches):
        model = self.model
        x = model.target_embedding(ops.expand_dims(last_tokens, 1))
        x = x + model.position_encoding(x, start_index=step)
        self_mask, history = self._self_attention_mask(step, caches)
        new_caches = []
        for index, layer in enumerate(self.layers):
            keys, values = caches[2 * index], caches[2 * index + 1]
            cross_keys, cross_values = self.cross[index]

            def self_attend(h, index=index, layer=layer, keys=keys, values=values):
                attention = layer.self_attention
                query, key, value = self._project_query_key_value(index, attention, h)
                query = self._step_heads(attention, query)
                keys = self._write(keys, self._step_heads(attention, key), step, self.keys_transposed)
                values = self._write(values, self._step_heads(attention, value), step)
                # Each beam attends over every slot's entries; the mask keeps
                # those of its own hypothesis (see `reorder`).
                attended = attention.attention(
                    query, self._keys_for_attention(keys), values, attention_mask=self_mask
                )
                return attention.output_projection(self._merge_step_heads(attention, attended)), (keys, values)

            def cross_attend(h, layer=layer, keys=cross_keys, values=cross_values):
                attention = layer.cross_attention
                query = self._step_heads(attention, attention.query_projection(h))
                attended = attention.attention(
                    query, self._keys_for_attention(keys), values, attention_mask=self.source_mask
                )
                return attention.output_projection(self._merge_step_heads(attention, attended)), None

            x, written = layer._residual(x, self_attend, layer.self_attention_norm, False)
            new_caches.extend(written)
            x, _ = layer._residual(x, cross_attend, layer.cross_attention_norm, False)
            x, _ = layer._residual(
                x, lambda h, layer=layer: (layer.feed_forward(h, training=False), None),
                layer.feed_forward_norm, False,
            )
        if model.decoder.final_norm is not None:
            x = model.decoder.final_norm(x)
        logits = model.target_embedding.logits(x)[:, 0]
        return ops.cast(logits, "float32"), tuple(new_caches) + history

    def reorder(self, caches, rows):
        """A beam that continues another takes over its slot history; the
        keys and values stay where they were written, so nothing big moves
        (a gather of every cache per step was a quarter of beam search)."""
        if self.beams == 1:
            return tuple(ops.take(cache, rows, axis=0) for cache in caches)
        return caches[:-1] + (ops.take(caches[-1], rows, axis=0),)


class _FullStepper:
    """Re-runs `model.decode` on BOS + every token so far at each step.

    What tutorials do (no cache): the reference the cached path must
    reproduce, and a benchmark baseline.
    """

    def __init__(self, model, source_ids, repeats, buffer_length, bos_id):
        self.model = model
        self.bos_id = bos_id
        self.memory = _repeat_rows(model.encode(source_ids, training=False), repeats)
        self.source_ids = _repeat_rows(source_ids, repeats)
        # A loop variable must hold a tensor; nothing is cached.
        self.initial_cache = (ops.zeros((), dtype="float32"),)

    def __call__(self, step, last_tokens, tokens, caches):
        bos = ops.full((ops.shape(tokens)[0], 1), self.bos_id, dtype="int32")
        prefix = ops.concatenate([bos, tokens[:, :-1]], axis=1)
        logits = self.model.decode(prefix, self.memory, self.source_ids, training=False)
        logits = ops.take(logits, step, axis=1)
        return ops.cast(logits, "float32"), caches

    def reorder(self, caches, rows):
        return caches


def _stepper(model, source_ids, repeats, buffer_length, use_cache, bos_id, xla_ops):
    if use_cache:
        return _CachedStepper(model, source_ids, repeats, buffer_length, xla_ops)
    return _FullStepper(model, source_ids, repeats, buffer_length, bos_id)


# ---------------------------------------------------------------------------
# The searches as plain functions of ops


def _greedy(
    model, source_ids, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id, use_cache,
    xla_ops=False,
):
    source_ids = ops.cast(source_ids, "int32")
    limits, buffer_length = _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_length)
    stepper = _stepper(model, source_ids, 1, buffer_length, use_cache, bos_id, xla_ops)
    batch = _batch_size(source_ids)
    vocabulary_size = model.vocabulary_size
    vocabulary = ops.arange(vocabulary_size, dtype="int32")

    def cond(step, tokens, last_tokens, finished, scores, lengths, cache):
        return ops.logical_and(ops.less(step, buffer_length), ops.logical_not(ops.all(finished)))

    def body(step, tokens, last_tokens, finished, scores, lengths, cache):
        logits, cache = stepper(step, last_tokens, tokens, cache)
        # log P(token) = logit - logsumexp(logits), over the whole vocabulary.
        normalizer = ops.logsumexp(logits, axis=-1)
        allowed = _mask_special_tokens(logits, vocabulary, step, bos_id, eos_id, pad_id, min_length)
        next_tokens = ops.cast(ops.argmax(allowed, axis=-1), "int32")
        token_logits = ops.take_along_axis(logits, ops.expand_dims(next_tokens, 1), axis=1)[:, 0]
        alive = ops.logical_not(finished)
        next_tokens = ops.where(alive, next_tokens, pad_id)
        scores = scores + ops.where(alive, token_logits - normalizer, 0.0)
        lengths = lengths + ops.cast(alive, "int32")
        tokens = _write_column(tokens, step, next_tokens)
        finished = ops.logical_or(
            finished,
            ops.logical_or(ops.equal(next_tokens, eos_id), ops.greater_equal(step + 1, limits)),
        )
        return step + 1, tokens, next_tokens, finished, scores, lengths, cache

    state = (
        ops.convert_to_tensor(0, dtype="int32"),
        ops.zeros((batch, buffer_length), dtype="int32"),
        ops.full((batch,), bos_id, dtype="int32"),
        ops.zeros((batch,), dtype="bool"),
        ops.zeros((batch,), dtype="float32"),
        ops.zeros((batch,), dtype="int32"),
        stepper.initial_cache,
    )
    _, tokens, _, _, scores, lengths, _ = ops.while_loop(cond, body, state)
    return {"ids": tokens, "scores": scores, "log_probs": scores, "lengths": lengths}


def _beam(
    model, source_ids, beam_size, alpha, max_extra_length, max_length, min_length,
    bos_id, eos_id, pad_id, use_cache, return_all_beams, xla_ops=False,
):
    source_ids = ops.cast(source_ids, "int32")
    limits, buffer_length = _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_length)
    stepper = _stepper(model, source_ids, beam_size, buffer_length, use_cache, bos_id, xla_ops)
    batch = _batch_size(source_ids)
    rows = batch * beam_size
    vocabulary_size = model.vocabulary_size
    limits = ops.expand_dims(limits, 1)  # (batch, 1) against (batch, beam)
    neg_inf = ops.cast(_NEG_INF, "float32")
    # Row offsets of each sentence's beams in the flattened (batch * beam) axis.
    row_offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * beam_size, 1)
    own_index = ops.broadcast_to(ops.arange(beam_size, dtype="int32")[None], (batch, beam_size))
    per_row = min(beam_size, vocabulary_size)
    # Flat index of (beam, token) in a sentence's beam * vocabulary extensions.
    beam_offsets = ops.reshape(
        ops.tile(ops.arange(beam_size, dtype="int32") * vocabulary_size, (batch,)), (rows, 1)
    )

    def cond(step, tokens, last_tokens, finished, log_probs, scores, lengths, cache):
        return ops.logical_and(ops.less(step, buffer_length), ops.logical_not(ops.all(finished)))

    def one_step(step, tokens, last_tokens, finished, log_probs, scores, lengths, cache):
        logits, cache = stepper(step, last_tokens, tokens, cache)
        # Extensions of live beams: beam log P + logit - logsumexp(logits).
        # All have length step + 1, hence the same penalty: the best of them
        # by log P are the best by score, and only beam_size can be kept.
        # The offset is constant along a row, so the best extensions of a
        # sentence are among the best `per_row` tokens of each of its beams:
        # a top-k per row, then over the beam * per_row candidates (ties go to
        # the lower flat index either way). Cheaper than one top-k over
        # beam * vocabulary values per sentence.
        row_values, row_indices, normalizers = _top_k_and_logsumexp(
            logits, per_row, step, bos_id, eos_id, pad_id, min_length
        )
        offsets = ops.reshape(log_probs, (rows,)) - normalizers
        offsets = ops.where(ops.reshape(finished, (rows,)), neg_inf, offsets)
        candidates = ops.reshape(row_values + ops.expand_dims(offsets, 1), (batch, beam_size * per_row))
        candidate_ids = ops.reshape(row_indices + beam_offsets, (batch, beam_size * per_row))
        extension_log_probs, positions = ops.top_k(candidates, k=beam_size, sorted=True)
        indices = ops.take_along_axis(candidate_ids, ops.cast(positions, "int32"), axis=1)
        extension_scores = extension_log_probs / length_penalty(step + 1, alpha)
        # Finished beams compete unchanged, under their final score.
        finished_scores = ops.where(finished, scores, neg_inf)
        pooled_scores = ops.concatenate([extension_scores, finished_scores], axis=1)
        new_scores, picks = ops.top_k(pooled_scores, k=beam_size, sorted=True)
        picks = ops.cast(picks, "int32")

        def pick(extension_values, finished_values):
            pooled = ops.concatenate([extension_values, finished_values], axis=1)
            return ops.take_along_axis(pooled, picks, axis=1)

        new_log_probs = pick(extension_log_probs, log_probs)
        parents = pick(indices // vocabulary_size, own_index)
        # A finished pick, or a dead one (fewer live candidates than beams,
        # with a tiny vocabulary), is frozen: no token, no length.
        frozen = ops.logical_or(ops.greater_equal(picks, beam_size), ops.equal(new_scores, neg_inf))
        new_tokens = ops.where(frozen, pad_id, pick(indices % vocabulary_size, own_index))
        new_lengths = ops.take_along_axis(lengths, parents, axis=1) + ops.cast(ops.logical_not(frozen), "int32")
        new_finished = ops.logical_or(
            frozen,
            ops.logical_or(ops.equal(new_tokens, eos_id), ops.greater_equal(step + 1, limits)),
        )
        parent_rows = ops.reshape(row_offsets + parents, (rows,))
        flat_tokens = ops.reshape(new_tokens, (rows,))
        tokens = _write_column(ops.take(tokens, parent_rows, axis=0), step, flat_tokens)
        cache = stepper.reorder(cache, parent_rows)
        return step + 1, tokens, flat_tokens, new_finished, new_log_probs, new_scores, new_lengths, cache

    # Only the first beam is live at the start, so the first step's top-k
    # holds distinct tokens.
    first_beam = ops.equal(ops.arange(beam_size, dtype="int32"), 0)
    initial = ops.where(first_beam, 0.0, neg_inf)
    initial = ops.broadcast_to(ops.expand_dims(initial, 0), (batch, beam_size))
    state = (
        ops.convert_to_tensor(0, dtype="int32"),
        ops.zeros((rows, buffer_length), dtype="int32"),
        ops.full((rows,), bos_id, dtype="int32"),
        ops.zeros((batch, beam_size), dtype="bool"),
        initial,
        initial,
        ops.zeros((batch, beam_size), dtype="int32"),
        stepper.initial_cache,
    )
    _, tokens, _, _, log_probs, scores, lengths, _ = ops.while_loop(cond, one_step, state)
    # top_k keeps the beams sorted by score, best first.
    tokens = ops.reshape(tokens, (batch, beam_size, ops.shape(tokens)[1]))
    if return_all_beams:
        return {"ids": tokens, "scores": scores, "log_probs": log_probs, "lengths": lengths}
    return {
        "ids": tokens[:, 0],
        "scores": scores[:, 0],
        "log_probs": log_probs[:, 0],
        "lengths": lengths[:, 0],
    }


# ---------------------------------------------------------------------------
# Compilation per backend

# model -> {options: compiled function}; weak so that models can be freed.
_COMPILED = weakref.WeakKeyDictionary()


def _in_trace(source_ids):
    """True while a TF graph or a JAX trace is being built."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.inside_function()
    if backend == "jax":
        import jax

        return isinstance(source_ids, jax.core.Tracer)
    return False


def _compile(model, key, search, jit_compile):
    """`search(model, source_ids) -> dict`, compiled once per model and options.

    The compiled function holds the model through a weak reference, so the
    per-model table does not keep the model alive.
    """
    per_model = _COMPILED.setdefault(model, {})
    if key in per_model:
        return per_model[key]
    model_ref = weakref.ref(model)
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        function = tf.function(
            lambda source_ids: search(model_ref(), source_ids),
            autograph=False,
            jit_compile=jit_compile,
            # One graph for every batch shape; XLA still specialises per shape.
            input_signature=[tf.TensorSpec((None, None), tf.int32)],
        )
    elif backend == "jax":
        import jax

        def stateless(trainable, non_trainable, source_ids):
            model = model_ref()
            mapping = itertools.chain(
                zip(model.trainable_variables, trainable),
                zip(model.non_trainable_variables, non_trainable),
            )
            with keras.StatelessScope(state_mapping=mapping):
                return search(model, source_ids)

        jitted = jax.jit(stateless)

        def function(source_ids):
            model = model_ref()
            return jitted(
                [v.value for v in model.trainable_variables],
                [v.value for v in model.non_trainable_variables],
                source_ids,
            )

    elif backend == "torch":
        import torch

        def function(source_ids):
            with torch.no_grad():
                return search(model_ref(), source_ids)

    else:
        def function(source_ids):
            return search(model_ref(), source_ids)

    per_model[key] = function
    return function


def _run(model, source_ids, key, search, compile, jit_compile):
    if isinstance(source_ids, (list, tuple)):
        source_ids = ops.convert_to_tensor(source_ids, dtype="int32")
    _check_source(source_ids)
    if not model.built:
        model.build()
    if not compile or _in_trace(source_ids):
        return search(model, source_ids)
    source_ids = ops.cast(ops.convert_to_tensor(source_ids), "int32")
    return _compile(model, key, search, jit_compile)(source_ids)


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
    return _run(model, source_ids, key, search, compile, jit_compile)


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
    counting EOS. Finished hypotheses stay in the beam unchanged and compete
    with the extensions of live ones; the search ends when every beam has
    finished or the length limit is reached.

    Arguments as for `greedy_search`, plus:
        beam_size: number of beams.
        alpha: length penalty exponent (0: plain log-probability).
        return_all_beams: return every beam, best first, instead of the best.

    Returns:
        A dict of tensors: "ids" (batch, buffer_length) int32 (with
        `return_all_beams`, (batch, beam_size, buffer_length)); "scores" the
        length-penalised scores; "log_probs" the sums of log-probabilities;
        "lengths" tokens generated, EOS included. Beams that could never be
        filled (a vocabulary smaller than the beam) score -inf.
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
    return _run(model, source_ids, key, search, compile, jit_compile)
