"""The decoding loop's extent and phases: per-sentence output limits and
the buffer width, the decoder over a source, and `ops.while_loop` run in
phases of growing decoder capacity (see `keras_transformer.decoding.search`)."""

from keras import ops


def _lengths_and_buffer(source_ids, pad_id, max_extra_length, max_output_length):
    """Per-sentence output limits (batch,) and the output buffer width."""
    source_lengths = ops.sum(ops.cast(ops.not_equal(source_ids, pad_id), "int32"), axis=1)
    limits = source_lengths + max_extra_length
    width = source_ids.shape[1]
    if width is None:  # a TF graph with an unknown source length
        width = ops.shape(source_ids)[1]
    buffer_length = width + max_extra_length
    if max_output_length is not None:
        limits = ops.minimum(limits, max_output_length)
        buffer_length = (
            min(buffer_length, max_output_length)
            if isinstance(buffer_length, int)
            else ops.minimum(buffer_length, max_output_length)
        )
    # An empty source with max_extra_length=0 still gets one step (EOS or a token).
    limits = ops.maximum(limits, 1)
    if isinstance(buffer_length, int):
        buffer_length = max(buffer_length, 1)
    else:
        buffer_length = ops.maximum(buffer_length, 1)
    return limits, buffer_length


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
