"""Beam search (conventions in `keras_transformer.decoding.search`)."""

from typing import NamedTuple

from keras import ops

from keras_transformer.decoding import compiled, phases
from keras_transformer.decoding.candidates import _NEG_INF, _top_k_and_logsumexp, top_k
from keras_transformer.decoding.constraints import _Constraints
from keras_transformer.decoding.inputs import check_inputs, check_prefix
from keras_transformer.decoding import penalty
from keras_transformer.decoding.options import check_alpha, check_int, check_length_penalty, check_search_options
from keras_transformer.models.incremental import batch_size_of, write_column
from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID


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
    model, source_ids, beam_size, alpha, max_extra_length, max_output_length, min_length,
    bos_id, eos_id, pad_id, use_cache, return_all_beams, jit_compile=False, prefix_ids=None,
    no_repeat_ngram_size=0, limit_rule="fallback", length_penalty="gnmt",
):
    def divisor(length):
        return penalty.length_penalty(length, alpha, length_penalty)

    source_ids = ops.cast(source_ids, "int32")
    limits, buffer_length, buffer_bound = phases._lengths_and_buffer(source_ids, pad_id, max_extra_length,
                                                                     max_output_length)
    decoder = phases._decoder(model, source_ids, beam_size, buffer_length, use_cache, jit_compile)
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
    first_column = ops.equal(ops.arange(per_row, dtype="int32"), 0)
    whole_limits = limits

    def loop(decoder, sentences):
        """cond and body over the sentences `sentences` (None: the whole batch)."""
        limits = whole_limits if sentences is None else ops.take(whole_limits, sentences, axis=0)
        sentence_constraints = constraints if sentences is None else constraints.select(sentences)
        batch = batch_size_of(limits)
        rows = batch * beam_size
        # The most favourable penalty a live hypothesis can still get: the
        # one at its limit (both rules grow with the length, log P <= 0).
        best_penalty = divisor(limits)
        row_limits = ops.repeat(limits, beam_size, axis=0)  # (rows,)
        limits = ops.expand_dims(limits, 1)  # (batch, 1) against (batch, candidates)
        row_offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * beam_size, 1)
        # Flat index of (beam, token) in a sentence's beam * vocabulary extensions.
        beam_offsets = ops.reshape(
            ops.tile(ops.arange(beam_size, dtype="int32") * vocabulary_size, (batch,)), (rows, 1)
        )

        def cond(step, beam, decoder_state):
            return ops.logical_and(ops.less(step, buffer_length), ops.logical_not(ops.all(beam.done)))

        def body(step, beam, decoder_state):
            logits, decoder_state = decoder.step(decoder_state, beam.last_tokens, step)
            row_values, row_indices, normalizers = _top_k_and_logsumexp(
                logits, per_row, step, bos_id, eos_id, pad_id, min_length,
                allowed=sentence_constraints.allowed(step, beam.live_tokens, logits),
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
            log_probs, positions = top_k(candidates, width)
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
            ending_scores = ops.where(ends, log_probs / divisor(step + 1), neg_inf)
            pooled_scores = ops.concatenate([beam.finished_scores, ending_scores], axis=1)
            finished_scores, picks = top_k(pooled_scores, beam_size)
            finished_tokens = _take_rows(ops.concatenate([beam.finished_tokens, hypotheses], axis=1), picks)
            finished_log_probs = _take_rows(
                ops.concatenate([beam.finished_log_probs, ops.where(ends, log_probs, neg_inf)], axis=1), picks
            )
            ending_lengths = ops.broadcast_to(ops.reshape(step + 1, (1, 1)), ops.shape(tokens))
            finished_lengths = _take_rows(ops.concatenate([beam.finished_lengths, ending_lengths], axis=1), picks)

            # Live: the best beam_size of those that do not end. A sentence
            # already done keeps its live set: under "fallback" the live
            # hypotheses at the limit are its answer when none finished.
            live_log_probs, picks = top_k(ops.where(ends, neg_inf, log_probs), beam_size)
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

        return cond, body

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
    # Between phases, only the sentences not done go on (where shapes may change).
    compaction = phases.compaction(jit_compile, beam_size, (True, True) + (False,) * 6, lambda state: state[1].done)
    _, beam, _ = phases._while_loop_in_phases(
        loop, (ops.convert_to_tensor(0, dtype="int32"), start), decoder, buffer_length, compaction, buffer_bound
    )
    beam = BeamState(*beam)
    tokens, scores = beam.finished_tokens, beam.finished_scores
    log_probs, lengths = beam.finished_log_probs, beam.finished_lengths
    limits = ops.expand_dims(whole_limits, 1)
    if limit_rule == "fallback":
        # A sentence none of whose hypotheses ended returns its live ones,
        # cut at the limit (tensor2tensor's rule).
        none_finished = ops.expand_dims(ops.equal(scores[:, 0], neg_inf), 1)
        live_lengths = ops.broadcast_to(limits, (batch, beam_size))
        live_scores = beam.live_log_probs / divisor(live_lengths)
        tokens = ops.where(ops.expand_dims(none_finished, -1),
                           # The width named, not -1: an empty batch has nothing to infer it from.
                           ops.reshape(beam.live_tokens, (batch, beam_size, ops.shape(tokens)[-1])), tokens)
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


def beam_search(
    model,
    source_ids,
    *,
    beam_size=4,
    alpha=0.6,
    max_extra_length=50,
    max_output_length=None,
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
    length_penalty="gnmt",
):
    """Beam search with a length penalty (the paper's setting: 4 beams, GNMT's penalty, alpha 0.6).

    Hypotheses are ranked by log P / ((5 + length) / 6) ** alpha (GNMT), or
    by log P / length ** alpha (`length_penalty="length"`, Marian's and
    Transformers'), the length counting EOS. The standard algorithm (GNMT, tensor2tensor): `beam_size`
    live hypotheses drawn from the `2 * beam_size` best extensions at each
    step, finished ones kept in a separate set of the `beam_size` best, the
    best finished one returned (see the module docstring for early stopping).

    Arguments as for `greedy_search` (`prefix_ids` and
    `no_repeat_ngram_size` included), plus:
        beam_size: number of beams.
        alpha: length penalty exponent (0: plain log-probability).
        length_penalty: "gnmt" (default) or "length"
            (`keras_transformer.decoding.penalty.LENGTH_PENALTIES`).
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
    max_output_length = check_search_options(model, max_extra_length, max_output_length, min_length, bos_id,
                                             eos_id, pad_id,
                                limit_rule)
    check_int("beam_size", beam_size, 1)
    alpha = check_alpha(alpha)
    check_length_penalty(length_penalty)
    check_int("no_repeat_ngram_size", no_repeat_ngram_size, 0)
    source_ids, _ = check_inputs(model, compiled.as_ids("source_ids", source_ids), pad_id=pad_id)
    extra_inputs = check_prefix(prefix_ids, source_ids, bos_id, eos_id, pad_id, model.vocabulary_size)

    def search(model, source_ids, prefix_ids=None):
        return _beam(
            model, source_ids, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length,
            max_output_length=max_output_length, min_length=min_length, return_all_beams=return_all_beams,
            bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, use_cache=use_cache,
            jit_compile=bool(jit_compile), prefix_ids=prefix_ids, no_repeat_ngram_size=no_repeat_ngram_size,
            limit_rule=limit_rule, length_penalty=length_penalty,
        )

    key = (
        "beam", beam_size, alpha, max_extra_length, max_output_length, min_length, return_all_beams,
        bos_id, eos_id, pad_id, use_cache, jit_compile, bool(extra_inputs), no_repeat_ngram_size,
        limit_rule, length_penalty, phases.PHASE_CAPACITIES,
    )
    return compiled.run(model, source_ids, key, search, compile, jit_compile, extra_inputs, phased=True)
