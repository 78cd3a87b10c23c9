"""Constraints on the next token: a forced target prefix and repeated
n-grams (`keras.ops` only)."""

import copy

from keras import ops

from keras_transformer.models.incremental import batch_size_of


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
        self.beam_size = beam_size
        self.vocabulary = ops.arange(vocabulary_size, dtype="int32")
        self.pad_id = pad_id
        self.eos_id = eos_id
        self.prefix = None
        if prefix_ids is not None:
            prefix = ops.cast(prefix_ids, "int32")
            if beam_size > 1:
                prefix = ops.repeat(prefix, beam_size, axis=0)
            self.prefix = prefix
            self.prefix_lengths = ops.sum(ops.cast(ops.not_equal(prefix, pad_id), "int32"), axis=1)

    def select(self, sentences):
        """These constraints for the sentences `sentences` (int32 indices into
        the batch) only: their rows of the prefix (sentence-major beams)."""
        if self.prefix is None:
            return self
        selected = copy.copy(self)
        rows = sentences
        if self.beam_size > 1:
            beams = ops.arange(self.beam_size, dtype="int32")
            rows = ops.reshape(ops.expand_dims(sentences * self.beam_size, 1) + beams, (-1,))
        selected.prefix = ops.take(self.prefix, rows, axis=0)
        selected.prefix_lengths = ops.take(self.prefix_lengths, rows, axis=0)
        return selected

    @property
    def active(self):
        return self.prefix is not None or self.no_repeat_ngram_size > 0

    def allowed(self, step, history, logits):
        """`logits` (rows, V) of the token at `step` with -inf at the banned
        tokens, given each row's tokens so far `history` (rows, buffer);
        None when nothing is banned.

        Repeated n-grams ban at most one token per earlier position: a
        scatter of that many -inf, not a (rows, V) mask (two full passes
        over the logits, a third of n-gram blocking's cost under PyTorch).
        """
        if not self.active:
            return None
        forcing = forced = None
        if self.prefix is not None:
            width = ops.shape(self.prefix)[1]
            forced = ops.take(self.prefix, ops.minimum(step, width - 1), axis=1)  # (rows,)
            forcing = ops.less(step, self.prefix_lengths)  # (rows,)
        allowed = logits
        if self.no_repeat_ngram_size > 0:
            banned_ids = self._repeated_ids(step, history, forcing, forced)
            rows = batch_size_of(history)
            row_ids = ops.broadcast_to(ops.expand_dims(ops.arange(rows, dtype="int32"), 1), ops.shape(banned_ids))
            indices = ops.reshape(ops.stack([row_ids, banned_ids], axis=-1), (-1, 2))
            updates = ops.full_like(ops.reshape(banned_ids, (-1,)), float("-inf"), dtype=logits.dtype)
            allowed = ops.scatter_update(allowed, indices, updates)
        if self.prefix is not None:
            # While a row is forced, every token but the forced one is banned.
            other = ops.not_equal(ops.expand_dims(self.vocabulary, 0), ops.expand_dims(forced, 1))
            allowed = ops.where(ops.logical_and(ops.expand_dims(forcing, 1), other), float("-inf"), allowed)
        return allowed

    def _repeated_ids(self, step, history, forcing, forced):
        """(rows, buffer) ids of the tokens that would repeat an n-gram: for
        each earlier position j whose n - 1 tokens up to j equal the last
        n - 1 tokens, the token at j + 1; pad (banned anyway) elsewhere.
        EOS, and a forced token while its row is forced, are never banned."""
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
        matches = ops.logical_and(matches, ops.not_equal(following, self.eos_id))
        if forcing is not None:
            exempt = ops.logical_and(ops.expand_dims(forcing, 1), ops.equal(following, ops.expand_dims(forced, 1)))
            matches = ops.logical_and(matches, ops.logical_not(exempt))
        return ops.where(matches, following, self.pad_id)
