"""A search driven by a step function instead of a Transformer.

`StepFunction(tokens_to_logits, vocabulary_size)` is accepted wherever the
searches take a model (`greedy_search`, `sampling_search`, `beam_search`),
as flax's `beam_search(tokens_to_logits)` takes a function: a test can drive
a search with a hand-written model (a Markov chain, a scripted table)
without reaching into a Transformer. It keeps no cache: the function sees
the whole decoder input so far at every step.
"""

from keras import ops

from keras_transformer.models.incremental import write_column
from keras_transformer.data.special_tokens import PAD_ID


class _StepFunctionDecoder:
    """The step API of `keras_transformer.models.incremental` over a function."""

    def __init__(self, function, source_ids, beam_size, buffer_length):
        self.function = function
        self.source_ids = ops.repeat(source_ids, beam_size, axis=0) if beam_size > 1 else source_ids
        rows = ops.shape(self.source_ids)[0]
        self.initial_state = (ops.zeros((rows, buffer_length), dtype="int32"),)

    def step(self, state, last_tokens, step):
        inputs = write_column(state[0], step, last_tokens)
        logits = self.function(self.source_ids, inputs, step)
        return ops.cast(logits, "float32"), (inputs,)

    def reorder(self, state, rows):
        return (ops.take(state[0], rows, axis=0),)


class StepFunction:
    """A model for the searches made of `tokens_to_logits(source_ids,
    inputs, step) -> logits`.

    Args:
        tokens_to_logits: called once per step with `source_ids` (rows,
            source_length), each sentence's source repeated once per beam;
            `inputs` (rows, buffer_length) int32, the decoder inputs so far
            (BOS at column 0, then the generated tokens; columns after
            `step` hold no meaning); and `step`, the column of the last
            input (a scalar tensor). Returns (rows, vocabulary_size) logits
            of the next token (unnormalised; the search normalises them).
            Written with `keras.ops`, it runs compiled on every backend.
        vocabulary_size: the number of token ids.
        pad_id: the padding id of the sources.
    """

    built = True
    trainable_variables = ()
    non_trainable_variables = ()

    def __init__(self, tokens_to_logits, vocabulary_size, pad_id=PAD_ID):
        if not callable(tokens_to_logits):
            raise ValueError(f"`tokens_to_logits` must be callable, got {tokens_to_logits!r}.")
        if isinstance(vocabulary_size, bool) or not isinstance(vocabulary_size, int) or vocabulary_size < 4:
            raise ValueError(f"`vocabulary_size` must be an int >= 4, got {vocabulary_size!r}.")
        self.tokens_to_logits = tokens_to_logits
        self.vocabulary_size = vocabulary_size
        self.pad_id = pad_id

    def incremental_decoder(self, source_ids, beam_size=1, buffer_length=None, jit_compile=False, use_cache=True):
        return _StepFunctionDecoder(self.tokens_to_logits, source_ids, beam_size, buffer_length)
