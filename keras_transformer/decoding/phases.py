"""The decoding loop's extent and phases: per-sentence output limits and
the buffer width, the decoder over a source, and `ops.while_loop` run in
phases of growing decoder capacity (see `keras_transformer.decoding.search`)."""

import contextlib
import contextvars
from typing import Callable, NamedTuple, Optional

import keras
from keras import ops


# While `compiled.run` traces a TensorFlow search for batches of known width
# (the graph's width dimension stays dynamic): a static bound on that width,
# so that the trace holds only the phases such a batch can reach. None: any width.
_SOURCE_WIDTH_BOUND = contextvars.ContextVar("source_width_bound", default=None)


def width_class(width):
    """The bound a compiled search for batches `width` wide is traced under:
    the smallest ladder rung at or above it, or None (every rung) past the
    ladder. A few classes keep the traces few; any bound gives the same
    outputs, as the phases do not change them."""
    return next((capacity for capacity in PHASE_CAPACITIES if width <= capacity), None)


@contextlib.contextmanager
def source_width_at_most(bound):
    """Searches traced in this block are for sources at most `bound` wide (None: any)."""
    token = _SOURCE_WIDTH_BOUND.set(bound)
    try:
        yield
    finally:
        _SOURCE_WIDTH_BOUND.reset(token)


def _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_output_length):
    """Per-sentence output limits (batch,), the output buffer width, and a
    static bound on that width where it is known only when the graph runs
    and the source width is bounded (`source_width_at_most`), else None."""
    source_lengths = ops.sum(ops.cast(ops.not_equal(source_ids, pad_id), "int32"), axis=1)
    limits = source_lengths + max_extra_length
    if max_output_length is not None:
        limits = ops.minimum(limits, max_output_length)
    # An empty source with max_extra_length=0 still gets one step (EOS or a token).
    limits = ops.maximum(limits, 1)

    def buffer_for(width):
        buffer = width + max_extra_length
        if isinstance(buffer, int):
            return max(buffer if max_output_length is None else min(buffer, max_output_length), 1)
        return ops.maximum(buffer if max_output_length is None else ops.minimum(buffer, max_output_length), 1)

    width, width_bound = source_ids.shape[1], None
    if width is None:  # a TF graph with an unknown source length
        width, width_bound = ops.shape(source_ids)[1], _SOURCE_WIDTH_BOUND.get()
    return limits, buffer_for(width), None if width_bound is None else buffer_for(width_bound)


def _decoder(model, source_ids, beam_size, buffer_length, use_cache, jit_compile):
    return model.incremental_decoder(
        source_ids, beam_size=beam_size, buffer_length=buffer_length, jit_compile=jit_compile, use_cache=use_cache
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

# The ladder of searches traced under `finer_phases` that drop the sentences
# that are done between phases (`compacts`): a boundary every 8 positions up
# to 64, then every 16. More boundaries drop done sentences sooner, and each
# phase attends over less room; each phase is one more loop in the graph.
FINER_PHASE_CAPACITIES = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128)

# While set (`finer_phases`): searches that compact decode in the finer ladder.
_FINER_PHASES = contextvars.ContextVar("finer_phases", default=False)


@contextlib.contextmanager
def finer_phases(enabled=True):
    """Searches traced in this block that drop the sentences that are done
    between phases (`compacts`: TensorFlow's plain graph, PyTorch) decode in
    FINER_PHASE_CAPACITIES' phases instead of PHASE_CAPACITIES'. The outputs
    are the same; a TensorFlow graph holds (and traces) three times the
    phases. On a base model's real-text stream (benchmarks/README.md) the
    plain SavedModel decoded the same texts about a seventh faster
    (`export_saved_model(..., finer_phases=True)`)."""
    token = _FINER_PHASES.set(bool(enabled))
    try:
        yield
    finally:
        _FINER_PHASES.reset(token)


def finer_phases_set():
    """Whether searches traced now decode in the finer ladder where they compact (`finer_phases`)."""
    return _FINER_PHASES.get()


def _phase_capacities(buffer_length, buffer_bound=None, ladder=None):
    """Each phase's capacity: the ladder's below the buffer length, then the
    buffer length. A buffer length known only when the graph runs (a
    TensorFlow graph with a dynamic source width) gets every rung below its
    static bound (`_lengths_and_buffer`'s; every rung without one), capped at the
    buffer length: the number of phases must be known when tracing, and a
    phase that starts with every position decoded runs no step. `ladder`:
    the rungs (None: PHASE_CAPACITIES)."""
    ladder = PHASE_CAPACITIES if ladder is None else ladder
    if isinstance(buffer_length, int):
        return [capacity for capacity in ladder if capacity < buffer_length] + [buffer_length]
    rungs = [capacity for capacity in ladder if buffer_bound is None or capacity < buffer_bound]
    return [ops.minimum(capacity, buffer_length) for capacity in rungs] + [buffer_length]


def compacts(jit_compile):
    """Whether the searches drop the sentences that are done between phases.

    Only where a loop's shapes may differ from the last one's: TensorFlow's
    plain graph and eager mode (`jit_compile=False`, the SavedModel's plain
    variant included) and PyTorch. XLA and JAX compile static shapes, so
    there every phase carries the whole batch, unless the search is traced
    under `static_row_buckets`. The outputs are the same either way: a
    sentence that is done changes no state at later steps."""
    backend = keras.backend.backend()
    if backend == "torch":
        return True
    return backend == "tensorflow" and not jit_compile


# While set (`static_row_buckets`): how many row buckets a search under
# static shapes (XLA, JAX) may decode a later phase in. 1: the whole batch.
_STATIC_ROW_BUCKETS = contextvars.ContextVar("static_row_buckets", default=1)


@contextlib.contextmanager
def static_row_buckets(count):
    """Searches traced in this block under static shapes (XLA, JAX) drop
    the sentences that are done between phases too: each phase after the
    first decodes the smallest of `count` row buckets (the batch, half of
    it, a quarter, ...) that holds the sentences not yet done, padded with
    done ones, one `ops.switch` branch per bucket. Each bucket is one more
    compiled copy of the phase's loop, so it costs compile time (the XLA
    SavedModel's warm-up) for decoding time; the outputs do not change."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"`count` must be an int >= 1, got {count!r}.")
    token = _STATIC_ROW_BUCKETS.set(count)
    try:
        yield
    finally:
        _STATIC_ROW_BUCKETS.reset(token)


def static_row_bucket_count():
    """The row buckets of searches traced now (`static_row_buckets`; 1: the whole batch)."""
    return _STATIC_ROW_BUCKETS.get()


class Compaction(NamedTuple):
    """How a search's loop state (after the step) splits into sentences:
    `done(loop_state)` (sentences,) bool; `per_row` one flag per tensor of
    `keras.tree.flatten(loop_state[1:])`: True for (sentences * beam_size,
    ...) rows, sentence-major, False for (sentences, ...). `row_buckets`:
    None to gather exactly the sentences not done (shapes may change), or
    the number of static row buckets (`static_row_buckets`)."""

    beam_size: int
    per_row: tuple
    done: Callable
    row_buckets: Optional[int] = None


def compaction(jit_compile, beam_size, per_row, done):
    """The search's `Compaction` where it drops done sentences between
    phases (`compacts`, or static row buckets), else None."""
    if compacts(jit_compile):
        return Compaction(beam_size, per_row, done)
    if static_row_bucket_count() > 1:
        return Compaction(beam_size, per_row, done, static_row_bucket_count())
    return None


def _row_indices(sentences, beam_size):
    """The rows (sentence * beam_size + beam) of `sentences`, sentence-major."""
    if beam_size == 1:
        return sentences
    rows = ops.expand_dims(sentences * beam_size, 1) + ops.arange(beam_size, dtype="int32")
    return ops.reshape(rows, (-1,))


def _take_sentences(loop_state, sentences, compaction):
    """`loop_state` restricted to `sentences` (the step stays)."""
    flat = keras.tree.flatten(loop_state[1:])
    taken = [
        ops.take(x, _row_indices(sentences, compaction.beam_size) if per_row else sentences, axis=0)
        for x, per_row in zip(flat, compaction.per_row)
    ]
    return (loop_state[0],) + tuple(keras.tree.pack_sequence_as(loop_state[1:], taken))


def _put_sentences(whole, sentences, part, compaction):
    """`whole` with the sentences `sentences` replaced by `part`'s, and
    `part`'s step."""
    flat = keras.tree.flatten(whole[1:])
    put = []
    for x, y, per_row in zip(flat, keras.tree.flatten(part[1:]), compaction.per_row):
        indices = _row_indices(sentences, compaction.beam_size) if per_row else sentences
        put.append(ops.scatter_update(x, ops.expand_dims(indices, 1), y))
    return (part[0],) + tuple(keras.tree.pack_sequence_as(whole[1:], put))


def _within(capacity, cond):
    """A phase's loop condition: `cond`, while the decoder state has room."""
    def phase_cond(step, *rest):
        return ops.logical_and(ops.less(step, capacity), cond(step, *rest))

    return phase_cond


def _while_loop_in_phases(loop, loop_state, decoder, buffer_length, compaction=None, buffer_bound=None):
    """`ops.while_loop(cond, body, loop_state + (decoder state,))` with
    `cond, body = loop(decoder, None)`, the step (`loop_state[0]`) counting
    from 0, run as one loop per phase: each phase steps while `cond` holds
    and the decoder state has room, then the state grows (`decoder.grow`)
    for the next phase. The body is traced once per phase (its shapes
    differ). A decoder without `grow` runs in one phase.

    With a `compaction` (where `compacts`) and a decoder that can `select`,
    each phase after the first decodes only the sentences not yet done:
    `loop(decoder.select(sentences), sentences)` gives their cond and body
    (`sentences` indexes the whole batch), their loop and decoder states
    are gathered from the last phase's, and each phase's results are
    scattered back into the whole batch's loop state, which is returned
    (with the last phase's decoder state), in FINER_PHASE_CAPACITIES' phases
    under `finer_phases`. `buffer_bound`: see `_phase_capacities`."""
    if not hasattr(decoder, "grow"):
        cond, body = loop(decoder, None)
        return ops.while_loop(cond, body, loop_state + (decoder.initial_state,))
    if not hasattr(decoder, "select"):
        compaction = None
    finer = compaction is not None and not compaction.row_buckets and finer_phases_set()
    capacities = _phase_capacities(buffer_length, buffer_bound, FINER_PHASE_CAPACITIES if finer else None)
    if compaction is not None and compaction.row_buckets:
        return _while_loop_in_row_buckets(loop, loop_state, decoder, capacities, compaction)
    state = decoder.empty_state(capacities[0])
    whole, sentences = loop_state, None
    for index, capacity in enumerate(capacities):
        if index > 0:
            state = decoder.grow(state, capacity)
        cond, body = loop(decoder, sentences)
        results = tuple(ops.while_loop(_within(capacity, cond), body, loop_state + (state,)))
        loop_state, state = results[:-1], tuple(results[-1])
        if compaction is None:
            continue
        whole = loop_state if sentences is None else _put_sentences(whole, sentences, loop_state, compaction)
        if index + 1 < len(capacities):
            # Positions (in this phase's sentences) of those not done.
            going_on = ops.cast(ops.nonzero(ops.logical_not(compaction.done(loop_state)))[0], "int32")
            sentences = going_on if sentences is None else ops.take(sentences, going_on, axis=0)
            loop_state = _take_sentences(loop_state, going_on, compaction)
            state = decoder.select_state(state, going_on)
            decoder = decoder.select(going_on)
    if compaction is None:
        return results
    return whole + (state,)


def row_bucket(going_on, sizes):
    """The index of the smallest of `sizes` (descending) that holds
    `going_on` sentences (the first, the whole batch, for more)."""
    return ops.maximum(ops.sum(ops.cast(ops.greater_equal(ops.stack(sizes), going_on), "int32")) - 1, 0)


def _while_loop_in_row_buckets(loop, loop_state, decoder, capacities, compaction):
    """`_while_loop_in_phases` under static shapes with row buckets: the
    first phase decodes the whole batch; each later one the smallest bucket
    (the batch, half of it, a quarter, ... `compaction.row_buckets` in all,
    at least one sentence) that holds the sentences not done, those first
    and done ones after (a done sentence changes nothing), as one
    `ops.switch` branch per bucket. Each branch scatters its sentences'
    loop and decoder states back into the whole batch's, so every branch
    returns the same shapes."""
    whole_batch = ops.shape(compaction.done(loop_state))[0]
    if isinstance(whole_batch, int):  # a small batch has fewer distinct buckets
        sizes = sorted({max(whole_batch // 2**k, 1) for k in range(compaction.row_buckets)}, reverse=True)
    else:  # known when XLA compiles
        sizes = [whole_batch] + [ops.maximum(whole_batch // 2**k, 1) for k in range(1, compaction.row_buckets)]
    state = decoder.empty_state(capacities[0])
    for index, capacity in enumerate(capacities):
        if index > 0:
            state = decoder.grow(state, capacity)

        def run(loop_state, state, sentences=None, capacity=capacity):
            part_decoder, part_state, part_loop = decoder, state, loop_state
            if sentences is not None:
                part_decoder = decoder.select(sentences)
                part_state = decoder.select_state(state, sentences)
                part_loop = _take_sentences(loop_state, sentences, compaction)
            cond, body = loop(part_decoder, sentences)
            results = tuple(ops.while_loop(_within(capacity, cond), body, part_loop + (part_state,)))
            if sentences is not None:
                results = (_put_sentences(loop_state, sentences, results[:-1], compaction)
                           + (decoder.put_state(state, sentences, results[-1]),))
            return keras.tree.flatten(results)

        template = loop_state + (state,)
        if index == 0 or len(sizes) == 1:
            flat = run(loop_state, state)
        else:
            done = compaction.done(loop_state)
            order = ops.cast(ops.argsort(ops.cast(done, "int32")), "int32")  # not done first
            bucket = row_bucket(ops.sum(ops.cast(ops.logical_not(done), "int32")), sizes)
            branches = [lambda loop_state, state: run(loop_state, state)] + [
                lambda loop_state, state, size=size: run(loop_state, state, ops.slice(order, [0], [size]))
                for size in sizes[1:]
            ]
            flat = ops.switch(bucket, branches, loop_state, state)
        results = keras.tree.pack_sequence_as(template, list(flat))
        loop_state, state = tuple(results[:-1]), tuple(results[-1])
    return loop_state + (state,)
