"""A prototype for decode_variants.py: beam search that drops the sentences already done at each phase boundary.

The shipped search (`keras_transformer.decoding.beam`) keeps every sentence of a batch until the
last one is done: a sentence that is done still costs its rows at every later step. Here the
search runs one phase (`decoding.phases`: capacities 16, 32, 64, 128, then the buffer) per call of
the shipped `beam_search`, on only the sentences not done when the phase starts: between calls the
beam state and the decoder's caches of those sentences are gathered, the next call starts from them
(its loop patched to take the carried state and run one phase), and every call's outputs are
written back into the batch's. A sentence done stays as it was (a done sentence's state never
changes), so the outputs are the shipped search's, up to float rounding of products over fewer
rows. Each call encodes its sentences again (the encoder's cost, counted in the timing).

The number of sentences left is known only when the graph runs, so this is the plain TensorFlow
graph (dynamic shapes); XLA would need a program per count. TensorFlow only, not shipped.
"""

import contextlib

from keras_transformer.decoding import beam_search, phases
from keras_transformer.decoding.beam import BeamState


def _gather_state(beam, decoder_state, sentences, beam_size):
    """The beam and decoder state of `sentences` (indices into the current batch)."""
    import tensorflow as tf

    rows = tf.reshape(sentences[:, None] * beam_size + tf.range(beam_size), [-1])
    per_row = ("live_tokens", "last_tokens")
    beam = BeamState(*(tf.gather(value, rows if name in per_row else sentences)
                       for name, value in zip(BeamState._fields, beam)))
    layers = len(decoder_state) - (1 if beam_size > 1 else 0)  # keys and values, then the slot history
    decoder_state = tuple(tf.gather(t, sentences) for t in decoder_state[:layers]) + tuple(
        tf.gather(t, rows) for t in decoder_state[layers:])
    return beam, decoder_state


@contextlib.contextmanager
def _one_phase(index, carried, stash):
    """`phases._while_loop_in_phases` replaced by: phase `index` only, starting from `carried`
    ((step, beam, decoder state), None for the first phase); the loop's results go to `stash`."""
    from keras import ops

    shipped = phases._while_loop_in_phases

    def loop(cond, body, loop_state, decoder, buffer_length):
        capacity = phases._phase_capacities(buffer_length)[index]
        if carried is None:
            state = decoder.empty_state(capacity)
        else:
            step, beam, state = carried
            loop_state, state = (step, beam), decoder.grow(state, capacity)

        def phase_cond(step, *rest):
            return ops.logical_and(ops.less(step, capacity), cond(step, *rest))

        results = tuple(ops.while_loop(phase_cond, body, loop_state + (state,)))
        stash.append((results[0], BeamState(*results[1]), tuple(results[2])))
        return results

    phases._while_loop_in_phases = loop
    try:
        yield
    finally:
        phases._while_loop_in_phases = shipped


def compacting_beam_search(model, source_ids, beam_size, alpha, max_extra_length):
    """`beam_search(model, source_ids, ...)["ids"]`, dropping done sentences at phase boundaries;
    to be called while a TensorFlow graph is traced (plain, no XLA)."""
    import tensorflow as tf

    options = dict(beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length, compile=False)
    _, buffer_length = phases._lengths_and_buffer(source_ids, model.pad_id, max_extra_length, None)
    keep = tf.range(tf.shape(source_ids)[0])  # the batch's sentences still decoded
    ids, carried = None, None
    for index in range(len(phases._phase_capacities(buffer_length))):
        if carried is not None:
            step, beam, decoder_state = carried
            live = tf.reshape(tf.where(tf.logical_not(beam.done)), [-1])
            beam, decoder_state = _gather_state(beam, decoder_state, tf.cast(live, tf.int32), beam_size)
            keep = tf.gather(keep, live)
            carried = (step, beam, decoder_state)
        stash = []
        with _one_phase(index, carried, stash):
            found = beam_search(model, tf.gather(source_ids, keep), **options)["ids"]
        ids = found if ids is None else tf.tensor_scatter_nd_update(ids, keep[:, None], found)
        carried = stash[-1]
    return ids
