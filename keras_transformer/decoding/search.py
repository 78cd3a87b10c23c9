"""Greedy and beam search over the model's incremental decoder.

Only search lives here: the searches drive any decoder with the step API of
`keras_transformer.models.incremental` (`initial_state`, `step`, `reorder`;
built by `Transformer.incremental_decoder`), and `compiled.py` compiles them
per backend. Everything is `keras.ops` (loops with `keras.ops.while_loop`),
so it runs under TensorFlow, JAX and PyTorch, and inside a TensorFlow graph
built without autograph or XLA (a SavedModel export): no Python `if`/`while`
on tensors, and every loop variable keeps a fixed shape within a loop
(pre-allocated buffers written in place of padding).

A search decodes in phases, one `ops.while_loop` each: the decoder's state
(its key/value caches) first has room for 16 target positions, then 32, 64
and 128 (`PHASE_CAPACITIES`), then the whole output buffer; between phases
it grows (`decoder.grow`, appending room at the end, so nothing written
moves). A step attends over all the positions its state has room for
(masked beyond those written), so up to 128 positions it costs at most
about what twice the positions written so far would, not what the whole
buffer does, while every loop keeps fixed shapes. The search's own buffers (tokens, finished
hypotheses) keep the buffer's width throughout. With a buffer length known
at trace time (JAX, PyTorch, TensorFlow run eagerly) only the capacities
below it get a phase; in a TensorFlow graph with a dynamic source width
every capacity gets one, capped at the buffer length, and those past it run
no step. The outputs do not depend on the phases.

Conventions shared by both searches:

- Source ids are (batch, source_length) int ids padded with `pad_id`, as the
  model was trained on (the data pipeline appends EOS to every source).
- A sentence may produce at most `source_length + max_extra_length` tokens,
  where source_length is its own count of non-pad ids (EOS included); the
  output buffer is `padded_source_length + max_extra_length` wide. An optional
  `max_length` caps both. `limit_rule` says what becomes of a hypothesis
  that reaches its limit without EOS (`LIMIT_RULES`): "fallback"
  (tensor2tensor, the default) returns it only when no hypothesis of its
  sentence ended with EOS; "force_eos" (fairseq) allows only EOS at the
  last position, so every hypothesis ends and pays for its EOS; "finish"
  (CTranslate2) finishes it as it is, unpaid, competing with those that
  ended. Greedy search and sampling have one hypothesis: "fallback" and
  "finish" return it as it is, "force_eos" ends it with EOS.
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
those that finish (EOS; under "finish" also the length limit) enter a separate finished set
(the `beam_size` best by final score), the best `beam_size` others stay live.
A finished hypothesis never competes with live ones for a slot, and the best
finished one is returned (under "fallback", the best live one at the limit
when none finished). A sentence stops early only when no live
hypothesis can beat the worst kept finished one even under the most
favourable length penalty it could reach (the one at its limit, since log P
only falls): a bound that never changes the result under any rule (a
hypothesis at its limit scores at most log P / lp(limit) under "finish",
less under "force_eos", which adds an EOS term, and under "fallback" it
competes only when nothing finished, when no early stop happens).
"""

import math
from typing import NamedTuple

import numpy as np
from keras import ops

from keras_transformer.decoding import compiled
from keras_transformer.decoding.inputs import check_inputs, check_prefix
from keras_transformer.models.incremental import batch_size_of, write_column
from keras_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID  # noqa: F401  (re-exported)

_NEG_INF = float("-inf")

# What becomes of a hypothesis at its length limit without EOS (see above).
LIMIT_RULES = ("fallback", "force_eos", "finish")


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


def check_sampling_options(temperature=1.0, top_k=0, top_p=1.0, seed=None):
    """Raises a ValueError naming the first bad sampling option (also run
    by `Translator` at construction, before any search)."""
    _check_int("top_k", top_k, 0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0 \
            or not math.isfinite(temperature):
        raise ValueError(f"`temperature` must be a finite number > 0, got {temperature!r}.")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"`top_p` must be a number in (0, 1], got {top_p!r}.")
    if seed is not None:
        _check_int("seed", seed, 0)


def check_limit_rule(limit_rule):
    if limit_rule not in LIMIT_RULES:
        raise ValueError(f"`limit_rule` must be one of {', '.join(map(repr, LIMIT_RULES))}, got {limit_rule!r}.")
    return limit_rule


def _check_options(model, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id, limit_rule="fallback"):
    check_limit_rule(limit_rule)
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


def _top_k_and_logsumexp(logits, k, step, bos_id, eos_id, pad_id, min_length, banned=None):
    """Per row of (rows, V) float32 logits: the k largest logits of allowed
    tokens (best first, ties to the lower id, as `top_k`), their ids, and
    logsumexp over all V logits. `banned` ((rows, V) booleans, from
    `_Constraints`) excludes more tokens; it takes the plain path, since
    the blockwise bound below counts on few banned ids.

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
    if vocabulary_size < BLOCKWISE_TOP_K_MIN_VOCABULARY or banned is not None:
        vocabulary = ops.arange(vocabulary_size, dtype="int32")
        allowed = logits if banned is None else ops.where(banned, _NEG_INF, logits)
        allowed = _mask_special_tokens(allowed, vocabulary, step, bos_id, eos_id, pad_id, min_length)
        if banned is not None:
            allowed = _keep_a_candidate(allowed, logits, eos_id)
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


class _Constraints:
    """Tokens a hypothesis may not take next: a forced target prefix, and
    repeated n-grams.

    `prefix_ids` (batch, width) holds each sentence's forced first tokens,
    padded with `pad_id`: while a hypothesis is shorter than its prefix,
    only the prefix's next token is allowed (its log-probability counts as
    any other's). `no_repeat_ngram_size` n > 0 bans any token that would
    complete an n-gram already in the hypothesis (fairseq's option); EOS is
    never banned by it (it occurs once, at the end, so no n-gram holding it
    can repeat).
    """

    def __init__(self, prefix_ids, no_repeat_ngram_size, beam_size, vocabulary_size, pad_id, eos_id):
        self.no_repeat_ngram_size = no_repeat_ngram_size
        self.vocabulary = ops.arange(vocabulary_size, dtype="int32")
        self.vocabulary_size = vocabulary_size
        self.eos_id = eos_id
        self.prefix = None
        if prefix_ids is not None:
            prefix = ops.cast(prefix_ids, "int32")
            if beam_size > 1:
                prefix = ops.repeat(prefix, beam_size, axis=0)
            self.prefix = prefix
            self.prefix_lengths = ops.sum(ops.cast(ops.not_equal(prefix, pad_id), "int32"), axis=1)

    @property
    def active(self):
        return self.prefix is not None or self.no_repeat_ngram_size > 0

    def banned(self, step, history):
        """(rows, V) booleans for the token at `step`, given each row's
        tokens so far `history` (rows, buffer); None when nothing is banned."""
        if not self.active:
            return None
        banned = ops.zeros((batch_size_of(history), self.vocabulary_size), dtype="bool")
        if self.no_repeat_ngram_size > 0:
            banned = ops.logical_or(banned, self._repeated(step, history))
        if self.prefix is not None:
            # A forced token is exempt from blocking: while a row is forced,
            # every other token is banned, and only those.
            width = ops.shape(self.prefix)[1]
            forced = ops.take(self.prefix, ops.minimum(step, width - 1), axis=1)
            forcing = ops.expand_dims(ops.less(step, self.prefix_lengths), 1)
            other = ops.not_equal(ops.expand_dims(self.vocabulary, 0), ops.expand_dims(forced, 1))
            banned = ops.where(forcing, other, banned)
        return banned

    def _repeated(self, step, history):
        """Tokens that would repeat an n-gram: for each earlier position j
        whose n - 1 tokens up to j equal the last n - 1 tokens, the token
        at j + 1."""
        n = self.no_repeat_ngram_size
        rows = batch_size_of(history)
        width = ops.shape(history)[1]
        positions = ops.arange(width, dtype="int32")
        if n == 1:  # every token already generated
            matches = ops.less(positions, step)
            following = history
        else:
            # j ranges over n-2 .. step-2: the n-gram ending at j + 1 lies before the step.
            matches = ops.logical_and(
                ops.greater_equal(positions, n - 2), ops.less_equal(positions, step - 2)
            )
            following = ops.pad(history[:, 1:], [[0, 0], [0, 1]], constant_values=0)
        matches = ops.broadcast_to(ops.expand_dims(matches, 0), (rows, width))
        for offset in range(n - 1):
            # history[:, j - offset] against history[:, step - 1 - offset].
            shifted = ops.pad(history, [[0, 0], [offset, 0]], constant_values=-1)[:, :width]
            last = ops.take(history, ops.maximum(step - 1 - offset, 0), axis=1)
            matches = ops.logical_and(matches, ops.equal(shifted, ops.expand_dims(last, 1)))
        row_ids = ops.broadcast_to(ops.expand_dims(ops.arange(rows, dtype="int32"), 1), (rows, width))
        indices = ops.reshape(ops.stack([row_ids, following], axis=-1), (-1, 2))
        counts = ops.scatter(indices, ops.reshape(ops.cast(matches, "float32"), (-1,)),
                             (rows, self.vocabulary_size))
        repeated = ops.greater(counts, 0.0)
        return ops.logical_and(repeated, ops.not_equal(ops.expand_dims(self.vocabulary, 0), self.eos_id))


# ---------------------------------------------------------------------------
# The searches as plain functions of ops


def _decoder(model, source_ids, beam_size, buffer_length, use_cache, xla_ops):
    return model.incremental_decoder(
        source_ids, beam_size=beam_size, max_length=buffer_length, xla_layout=xla_ops, use_cache=use_cache
    )


# The capacities (target positions the decoder state has room for) of the
# phases a search decodes in, before a last phase with room for the whole
# buffer. A step attends over every entry its state has room for, so its
# cost grows with the capacity (XLA, tiny preset, beam 4: 22.5 ms per step
# at 25 positions, 30.0 at 50, 64.3 at 200). Each phase's loop is traced and
# compiled on its own (XLA's compile time grows with the number of phases),
# so the ladder stops at 128: longer buffers decode their last positions
# with room for the whole buffer.
PHASE_CAPACITIES = (16, 32, 64, 128)


def _phase_capacities(buffer_length):
    """Each phase's capacity: the ladder's below the buffer length, then the
    buffer length. A buffer length known only when the graph runs (a
    TensorFlow graph with a dynamic source width) gets every rung, capped at
    the buffer length: the number of phases must be known when tracing, and
    a phase that starts with every position decoded runs no step."""
    if isinstance(buffer_length, int):
        return [capacity for capacity in PHASE_CAPACITIES if capacity < buffer_length] + [buffer_length]
    return [ops.minimum(capacity, buffer_length) for capacity in PHASE_CAPACITIES] + [buffer_length]


def _while_loop_in_phases(cond, body, loop_state, decoder, buffer_length):
    """`ops.while_loop(cond, body, loop_state + (decoder state,))`, the step
    (`loop_state[0]`) counting from 0, run as one loop per phase: each phase
    steps while `cond` holds and the decoder state has room, then the state
    grows (`decoder.grow`) for the next phase. The body is traced once per
    phase (its shapes differ). A decoder without `grow` runs in one phase."""
    if not hasattr(decoder, "grow"):
        return ops.while_loop(cond, body, loop_state + (decoder.initial_state,))
    capacities = _phase_capacities(buffer_length)
    state = decoder.empty_state(capacities[0])
    for index, capacity in enumerate(capacities):
        if index > 0:
            state = decoder.grow(state, capacity)

        def phase_cond(step, *rest, capacity=capacity):
            return ops.logical_and(ops.less(step, capacity), cond(step, *rest))

        results = tuple(ops.while_loop(phase_cond, body, loop_state + (state,)))
        loop_state, state = results[:-1], tuple(results[-1])
    return results


# Why not KerasHub's samplers (keras_hub.samplers.RandomSampler, TopKSampler,
# TopPSampler)? Their `get_next_token(probabilities)` draws with
# `keras.random.categorical(seed=self.seed_generator)`, and keras.random takes
# only an int or a `SeedGenerator` (a variable), never a seed tensor. Inside
# this search's `ops.while_loop`, compiled as `compiled.py` does:
# - JAX (`jax.jit` in a StatelessScope): the generator's advance is not
#   carried through our loop (their `Sampler.run_loop` threads it through
#   their own loop only); tried with keras-hub 0.32.0, every step drew the
#   same token and every call the same draws;
# - TensorFlow: the seed is a variable that each call advances, so a seed
#   cannot reproduce a call, and an exported graph would fix it at export;
# - PyTorch: their draw builds a torch.Generator from a concrete seed.
# Their combined top-k + top-p (`TopPSampler(k=...)`) also measures p against
# the whole distribution's mass of the k best, where ours (as HF
# transformers' warpers) renormalises the k best first. So the draw below is
# ours: the same semantics otherwise (temperature before the cuts, a token
# kept while the mass before it is below p), the CDF inverted at uniforms
# that numpy draws from the seed and that enter the compiled search as an
# input: one seed gives the same random numbers on every backend, in a
# plain graph and under XLA, and a new seed needs no recompilation.
def _sampled_tokens(allowed, uniforms, temperature, top_k, top_p):
    """One token per row of (rows, V) `allowed` logits (-inf: not allowed),
    drawn from softmax(logits / temperature) restricted to the `top_k` best
    and then to the smallest set of best tokens whose probability reaches
    `top_p`, by inverting the distribution's CDF at `uniforms` (rows,) in (0, 1)."""
    scaled = allowed / temperature
    neg_inf = ops.cast(_NEG_INF, "float32")
    if top_k > 0:
        kth = ops.top_k(scaled, k=min(top_k, scaled.shape[-1]), sorted=True)[0][:, -1:]
        scaled = ops.where(ops.less(scaled, kth), neg_inf, scaled)
    if top_p < 1.0:
        ordered = -ops.sort(-scaled, axis=-1)  # best first
        probabilities = ops.softmax(ordered, axis=-1)
        before = ops.cumsum(probabilities, axis=-1) - probabilities  # mass of the better tokens
        # The best token always stays; a token stays while the mass before it is below top_p.
        kept = ops.logical_or(ops.less(before, top_p), ops.equal(ops.arange(scaled.shape[-1]), 0))
        threshold = ops.min(ops.where(kept, ordered, float("inf")), axis=-1, keepdims=True)
        scaled = ops.where(ops.less(scaled, threshold), neg_inf, scaled)
    cdf = ops.cumsum(ops.softmax(scaled, axis=-1), axis=-1)
    target = ops.expand_dims(uniforms, 1) * cdf[:, -1:]
    # The first token whose CDF reaches the target (a zero-probability token
    # never does first: the CDF does not rise there, and targets exceed 0).
    return ops.cast(ops.argmax(ops.cast(ops.greater_equal(cdf, target), "int32"), axis=-1), "int32")


def _greedy(
    model, source_ids, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id, use_cache,
    xla_ops=False, prefix_ids=None, no_repeat_ngram_size=0, uniforms=None, temperature=1.0, top_k=0,
    top_p=1.0, limit_rule="fallback",
):
    """Greedy search, or random sampling when `uniforms` (batch, buffer) is given."""
    source_ids = ops.cast(source_ids, "int32")
    limits, buffer_length = _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_length)
    decoder = _decoder(model, source_ids, 1, buffer_length, use_cache, xla_ops)
    constraints = _Constraints(prefix_ids, no_repeat_ngram_size, 1, model.vocabulary_size, pad_id, eos_id)
    batch = batch_size_of(source_ids)
    vocabulary = ops.arange(model.vocabulary_size, dtype="int32")

    def cond(step, tokens, last_tokens, finished, scores, lengths, state):
        return ops.logical_and(ops.less(step, buffer_length), ops.logical_not(ops.all(finished)))

    def body(step, tokens, last_tokens, finished, scores, lengths, state):
        logits, state = decoder.step(state, last_tokens, step)
        # log P(token) = logit - logsumexp(logits), over the whole vocabulary.
        normalizer = ops.logsumexp(logits, axis=-1)
        banned = constraints.banned(step, tokens)
        allowed = logits if banned is None else ops.where(banned, _NEG_INF, logits)
        allowed = _mask_special_tokens(allowed, vocabulary, step, bos_id, eos_id, pad_id, min_length)
        if banned is not None:
            allowed = _keep_a_candidate(allowed, logits, eos_id)
        if limit_rule == "force_eos":
            allowed = _eos_only(allowed, logits, ops.greater_equal(step + 1, limits), eos_id)
        if uniforms is None:
            next_tokens = ops.cast(ops.argmax(allowed, axis=-1), "int32")
        else:
            column = ops.take(uniforms, ops.minimum(step, ops.shape(uniforms)[1] - 1), axis=1)
            next_tokens = _sampled_tokens(allowed, column, temperature, top_k, top_p)
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
    )
    _, tokens, _, _, scores, lengths, _ = _while_loop_in_phases(cond, body, loop_state, decoder, buffer_length)
    return {"ids": tokens, "scores": scores, "log_probs": scores, "lengths": lengths}


def _take_rows(x, indices):
    """x[b, indices[b, j]] for (batch, n, ...) `x` and (batch, m) `indices`."""
    indices = ops.cast(indices, "int32")
    for _ in range(len(x.shape) - 2):
        indices = ops.expand_dims(indices, -1)
    return ops.take_along_axis(x, indices, axis=1)


class BeamState(NamedTuple):
    """The beam loop's state besides the step and the decoder's caches.

    Live hypotheses are rows (batch * beam_size, ...) as the decoder sees
    them; finished ones (batch, beam_size, ...), best first. Slots not yet
    filled score -inf.
    """

    live_tokens: object  # (rows, buffer) tokens so far
    last_tokens: object  # (rows,) the decoder's next input
    live_log_probs: object  # (batch, beam_size), best first
    finished_tokens: object  # (batch, beam_size, buffer)
    finished_scores: object  # (batch, beam_size) log P / length penalty
    finished_log_probs: object  # (batch, beam_size)
    finished_lengths: object  # (batch, beam_size), EOS included
    done: object  # (batch,) no live hypothesis can change the result


def _beam(
    model, source_ids, beam_size, alpha, max_extra_length, max_length, min_length,
    bos_id, eos_id, pad_id, use_cache, return_all_beams, xla_ops=False, prefix_ids=None,
    no_repeat_ngram_size=0, limit_rule="fallback",
):
    source_ids = ops.cast(source_ids, "int32")
    limits, buffer_length = _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_length)
    decoder = _decoder(model, source_ids, beam_size, buffer_length, use_cache, xla_ops)
    constraints = _Constraints(
        prefix_ids, no_repeat_ngram_size, beam_size, model.vocabulary_size, pad_id, eos_id
    )
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
    row_limits = ops.repeat(limits, beam_size, axis=0)  # (rows,)
    limits = ops.expand_dims(limits, 1)  # (batch, 1) against (batch, candidates)
    row_offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * beam_size, 1)
    # Flat index of (beam, token) in a sentence's beam * vocabulary extensions.
    beam_offsets = ops.reshape(
        ops.tile(ops.arange(beam_size, dtype="int32") * vocabulary_size, (batch,)), (rows, 1)
    )
    first_column = ops.equal(ops.arange(per_row, dtype="int32"), 0)

    def cond(step, beam, decoder_state):
        return ops.logical_and(ops.less(step, buffer_length), ops.logical_not(ops.all(beam.done)))

    def body(step, beam, decoder_state):
        logits, decoder_state = decoder.step(decoder_state, beam.last_tokens, step)
        row_values, row_indices, normalizers = _top_k_and_logsumexp(
            logits, per_row, step, bos_id, eos_id, pad_id, min_length,
            banned=constraints.banned(step, beam.live_tokens),
        )
        if limit_rule == "force_eos":
            # At the limit a row extends by EOS alone, at its own log P.
            at_limit = ops.expand_dims(ops.greater_equal(step + 1, row_limits), 1)
            eos_values = ops.where(first_column, ops.expand_dims(logits[:, eos_id], 1), neg_inf)
            row_values = ops.where(at_limit, eos_values, row_values)
            row_indices = ops.where(at_limit, ops.where(first_column, eos_id, row_indices), row_indices)
        # A sentence that is done extends nothing (its dead beams are -inf already).
        live = ops.where(ops.expand_dims(beam.done, 1), neg_inf, beam.live_log_probs)
        offsets = ops.reshape(live, (rows,)) - normalizers
        candidates = ops.reshape(row_values + ops.expand_dims(offsets, 1), (batch, beam_size * per_row))
        candidate_ids = ops.reshape(row_indices + beam_offsets, (batch, beam_size * per_row))
        log_probs, positions = ops.top_k(candidates, k=width, sorted=True)
        flat_ids = ops.take_along_axis(candidate_ids, ops.cast(positions, "int32"), axis=1)
        parents = flat_ids // vocabulary_size
        tokens = flat_ids % vocabulary_size
        ends = ops.equal(tokens, eos_id)
        if limit_rule == "finish":
            ends = ops.logical_or(ends, ops.greater_equal(step + 1, limits))
        # Every candidate's whole hypothesis: its parent's tokens and this one.
        parent_rows = row_offsets + parents  # (batch, width)
        hypotheses = ops.take(beam.live_tokens, ops.reshape(parent_rows, (-1,)), axis=0)
        hypotheses = write_column(hypotheses, step, ops.reshape(tokens, (-1,)))
        hypotheses = ops.reshape(hypotheses, (batch, width, -1))

        # Finished: the best beam_size of the kept ones and those ending now
        # (ties keep the earlier ones, which come first).
        ending_scores = ops.where(ends, log_probs / length_penalty(step + 1, alpha), neg_inf)
        pooled_scores = ops.concatenate([beam.finished_scores, ending_scores], axis=1)
        finished_scores, picks = ops.top_k(pooled_scores, k=beam_size, sorted=True)
        finished_tokens = _take_rows(ops.concatenate([beam.finished_tokens, hypotheses], axis=1), picks)
        finished_log_probs = _take_rows(
            ops.concatenate([beam.finished_log_probs, ops.where(ends, log_probs, neg_inf)], axis=1), picks
        )
        ending_lengths = ops.broadcast_to(ops.reshape(step + 1, (1, 1)), ops.shape(tokens))
        finished_lengths = _take_rows(ops.concatenate([beam.finished_lengths, ending_lengths], axis=1), picks)

        # Live: the best beam_size of those that do not end. A sentence
        # already done keeps its live set: under "fallback" the live
        # hypotheses at the limit are its answer when none finished.
        live_log_probs, picks = ops.top_k(ops.where(ends, neg_inf, log_probs), k=beam_size, sorted=True)
        live_rows = ops.reshape(_take_rows(parent_rows, picks), (rows,))
        last_tokens = ops.reshape(_take_rows(tokens, picks), (rows,))
        live_tokens = ops.reshape(_take_rows(hypotheses, picks), (rows, -1))
        was_done = ops.repeat(beam.done, beam_size, axis=0)
        live_tokens = ops.where(ops.expand_dims(was_done, 1), beam.live_tokens, live_tokens)
        live_log_probs = ops.where(ops.expand_dims(beam.done, 1), beam.live_log_probs, live_log_probs)
        decoder_state = decoder.reorder(decoder_state, live_rows)

        # Done when no live hypothesis can beat the worst kept finished one
        # (-inf while fewer than beam_size have finished), or at the limit.
        bound = live_log_probs[:, 0] / best_penalty
        done = ops.logical_or(beam.done, ops.greater_equal(finished_scores[:, -1], bound))
        done = ops.logical_or(done, ops.greater_equal(step + 1, limits[:, 0]))
        beam = BeamState(live_tokens, last_tokens, live_log_probs, finished_tokens, finished_scores,
                         finished_log_probs, finished_lengths, done)
        return step + 1, beam, decoder_state

    # Only the first beam is live at the start, so the first step's
    # candidates hold distinct tokens.
    first_beam = ops.equal(ops.arange(beam_size, dtype="int32"), 0)
    initial = ops.broadcast_to(ops.expand_dims(ops.where(first_beam, 0.0, neg_inf), 0), (batch, beam_size))
    empty = ops.full((batch, beam_size), neg_inf, dtype="float32")
    start = BeamState(
        live_tokens=ops.zeros((rows, buffer_length), dtype="int32"),
        last_tokens=ops.full((rows,), bos_id, dtype="int32"),
        live_log_probs=initial,
        finished_tokens=ops.zeros((batch, beam_size, buffer_length), dtype="int32"),
        finished_scores=empty,
        finished_log_probs=empty,
        finished_lengths=ops.zeros((batch, beam_size), dtype="int32"),
        done=ops.zeros((batch,), dtype="bool"),
    )
    _, beam, _ = _while_loop_in_phases(
        cond, body, (ops.convert_to_tensor(0, dtype="int32"), start), decoder, buffer_length
    )
    beam = BeamState(*beam)
    tokens, scores = beam.finished_tokens, beam.finished_scores
    log_probs, lengths = beam.finished_log_probs, beam.finished_lengths
    if limit_rule == "fallback":
        # A sentence none of whose hypotheses ended returns its live ones,
        # cut at the limit (tensor2tensor's rule).
        none_finished = ops.expand_dims(ops.equal(scores[:, 0], neg_inf), 1)
        live_lengths = ops.broadcast_to(limits, (batch, beam_size))
        live_scores = beam.live_log_probs / length_penalty(live_lengths, alpha)
        tokens = ops.where(ops.expand_dims(none_finished, -1),
                           ops.reshape(beam.live_tokens, (batch, beam_size, -1)), tokens)
        scores = ops.where(none_finished, live_scores, scores)
        log_probs = ops.where(none_finished, beam.live_log_probs, log_probs)
        lengths = ops.where(none_finished, live_lengths, lengths)
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
    prefix_ids=None,
    no_repeat_ngram_size=0,
    limit_rule="fallback",
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
        prefix_ids: optional (batch, width) ids each output must start with,
            padded with `pad_id` (a row of pads: no prefix). The prefix
            counts in the output, its length and its log-probability.
        no_repeat_ngram_size: n > 0 forbids any n-gram from appearing twice
            in an output (fairseq's option; EOS and forced prefix tokens
            are exempt). Where blocking and `min_length` leave a step no
            token at all, EOS is allowed.
        limit_rule: what becomes of an output reaching its length limit
            without EOS, one of `LIMIT_RULES` (see the module docstring):
            "fallback" (default) and "finish" keep it as it is;
            "force_eos" allows only EOS at the last position (it wins over
            `min_length` and a longer prefix).

    Returns:
        A dict of tensors: "ids" (batch, buffer_length) int32, the tokens
        with EOS and then `pad_id`; "scores" and "log_probs" (batch,) the sum
        of the tokens' log-probabilities; "lengths" (batch,) tokens generated,
        EOS included.
    """
    max_length = _check_options(model, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id,
                                limit_rule)
    return _run_one_hypothesis(
        model, source_ids, prefix_ids, None, dict(
            max_extra_length=max_extra_length, max_length=max_length, min_length=min_length, bos_id=bos_id,
            eos_id=eos_id, pad_id=pad_id, use_cache=use_cache, xla_ops=bool(jit_compile),
            no_repeat_ngram_size=no_repeat_ngram_size, limit_rule=limit_rule,
        ), compile, jit_compile,
    )


def _run_one_hypothesis(model, source_ids, prefix_ids, uniforms, options, compile, jit_compile, sampling=None):
    """Greedy search, or sampling with `uniforms` and `sampling` options, compiled per option set."""
    _check_int("no_repeat_ngram_size", options["no_repeat_ngram_size"], 0)
    source_ids, _ = check_inputs(model, compiled.as_ids("source_ids", source_ids), pad_id=options["pad_id"])
    extra_inputs = () if uniforms is None else (uniforms,)
    extra_inputs += check_prefix(
        prefix_ids, source_ids, options["bos_id"], options["eos_id"], options["pad_id"], model.vocabulary_size
    )
    sampling = sampling or {}

    def search(model, source_ids, *inputs):
        uniforms = inputs[0] if sampling else None
        prefix = inputs[-1] if len(inputs) > bool(sampling) else None
        return _greedy(model, source_ids, prefix_ids=prefix, uniforms=uniforms, **options, **sampling)

    key = ("one hypothesis", tuple(sorted(options.items())), tuple(sorted(sampling.items())), jit_compile,
           len(extra_inputs), PHASE_CAPACITIES)
    return compiled.run(model, source_ids, key, search, compile, jit_compile, extra_inputs)


def sampling_search(
    model,
    source_ids,
    *,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=None,
    max_extra_length=50,
    max_length=None,
    min_length=0,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    use_cache=True,
    compile=True,
    jit_compile=False,
    prefix_ids=None,
    no_repeat_ngram_size=0,
    limit_rule="fallback",
):
    """Random sampling: each token drawn from the model's distribution
    (for back-translation, diverse outputs).

    The distribution is softmax(logits / temperature), cut to the `top_k`
    best tokens (0: all) and then to the nucleus: the smallest set of best
    tokens whose probability reaches `top_p` (1: all). Pad, BOS and banned
    tokens are never drawn, as in the other searches. The random numbers
    come from numpy's generator seeded with `seed` (None: fresh entropy) and
    enter the compiled search as an input, so the same seed gives the same
    outputs, and a new seed needs no recompilation.

    Arguments as for `greedy_search`, plus those above. Returns what
    `greedy_search` returns; "scores" and "log_probs" are the sums of the
    model's log-probabilities of the drawn tokens (before temperature and
    cuts).
    """
    max_length = _check_options(model, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id,
                                limit_rule)
    check_sampling_options(temperature, top_k, top_p, seed)
    rows, width = compiled.as_ids("source_ids", source_ids).shape
    if rows is None or width is None:
        raise ValueError("sampling_search needs `source_ids` of a known shape (it draws its random numbers first).")
    columns = width + max_extra_length if max_length is None else min(width + max_extra_length, max_length)
    # Uniforms in (0, 1): a zero would select a token of zero probability.
    uniforms = np.random.default_rng(seed).random((rows, max(columns, 1)))
    uniforms = np.clip(uniforms, np.finfo("float32").tiny, 1.0).astype("float32")
    return _run_one_hypothesis(
        model, source_ids, prefix_ids, uniforms, dict(
            max_extra_length=max_extra_length, max_length=max_length, min_length=min_length, bos_id=bos_id,
            eos_id=eos_id, pad_id=pad_id, use_cache=use_cache, xla_ops=bool(jit_compile),
            no_repeat_ngram_size=no_repeat_ngram_size, limit_rule=limit_rule,
        ), compile, jit_compile, sampling=dict(temperature=float(temperature), top_k=top_k, top_p=float(top_p)),
    )


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
    prefix_ids=None,
    no_repeat_ngram_size=0,
    limit_rule="fallback",
):
    """Beam search with the GNMT length penalty (the paper's setting: 4 beams, alpha 0.6).

    Hypotheses are ranked by log P / ((5 + length) / 6) ** alpha, the length
    counting EOS. The standard algorithm (GNMT, tensor2tensor): `beam_size`
    live hypotheses drawn from the `2 * beam_size` best extensions at each
    step, finished ones kept in a separate set of the `beam_size` best, the
    best finished one returned (see the module docstring for early stopping).

    Arguments as for `greedy_search` (`prefix_ids` and
    `no_repeat_ngram_size` included), plus:
        beam_size: number of beams.
        alpha: length penalty exponent (0: plain log-probability).
        return_all_beams: return the kept finished hypotheses, best first,
            instead of the best one.
        limit_rule: "fallback" (default, tensor2tensor's rule): a
            hypothesis cut at the length limit is returned only when none of
            its sentence ended with EOS; "force_eos" (fairseq's): only EOS
            may come at the last position, so every hypothesis pays for its
            end; "finish" (CTranslate2's): a cut hypothesis is finished as
            it is and competes unpaid with those that ended.

    Returns:
        A dict of tensors: "ids" (batch, buffer_length) int32 (with
        `return_all_beams`, (batch, beam_size, buffer_length)); "scores" the
        length-penalised scores; "log_probs" the sums of log-probabilities;
        "lengths" tokens generated, EOS included. Slots of the finished set
        that no hypothesis filled score -inf, with no tokens and length 0.
    """
    max_length = _check_options(model, max_extra_length, max_length, min_length, bos_id, eos_id, pad_id,
                                limit_rule)
    _check_int("beam_size", beam_size, 1)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"`alpha` must be a finite number >= 0, got {alpha!r}.")
    alpha = float(alpha)
    _check_int("no_repeat_ngram_size", no_repeat_ngram_size, 0)
    source_ids, _ = check_inputs(model, compiled.as_ids("source_ids", source_ids), pad_id=pad_id)
    extra_inputs = check_prefix(prefix_ids, source_ids, bos_id, eos_id, pad_id, model.vocabulary_size)

    def search(model, source_ids, prefix_ids=None):
        return _beam(
            model, source_ids, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length,
            max_length=max_length, min_length=min_length, return_all_beams=return_all_beams,
            bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, use_cache=use_cache,
            xla_ops=bool(jit_compile), prefix_ids=prefix_ids, no_repeat_ngram_size=no_repeat_ngram_size,
            limit_rule=limit_rule,
        )

    key = (
        "beam", beam_size, alpha, max_extra_length, max_length, min_length, return_all_beams,
        bos_id, eos_id, pad_id, use_cache, jit_compile, bool(extra_inputs), no_repeat_ngram_size,
        limit_rule, PHASE_CAPACITIES,
    )
    return compiled.run(model, source_ids, key, search, compile, jit_compile, extra_inputs)
