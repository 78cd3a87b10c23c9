"""Constraints on the next token: a forced target prefix and repeated
n-grams (`keras.ops` only)."""

import keras
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
        if self.no_repeat_ngram_size > 0:
            banned = self._repeated(step, history)
        else:
            banned = ops.zeros((batch_size_of(history), self.vocabulary_size), dtype="bool")
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
        # EOS is never banned: its matches count for nothing (cheaper here than on (rows, V)).
        matches = ops.logical_and(matches, ops.not_equal(following, self.eos_id))
        row_ids = ops.broadcast_to(ops.expand_dims(ops.arange(rows, dtype="int32"), 1), (rows, width))
        weights = ops.reshape(ops.cast(matches, "float32"), (-1,))
        if keras.backend.backend() == "torch":
            # Keras' torch scatter loops in Python over every entry; one
            # bincount over flat (row, token) indices does the same sum.
            flat = ops.reshape(row_ids * self.vocabulary_size + following, (-1,))
            counts = ops.reshape(ops.bincount(flat, weights=weights, minlength=rows * self.vocabulary_size),
                                 (rows, self.vocabulary_size))
        else:
            indices = ops.reshape(ops.stack([row_ids, following], axis=-1), (-1, 2))
            counts = ops.scatter(indices, weights, (rows, self.vocabulary_size))
        return ops.greater(counts, 0.0)
