"""Text in, text out: tokenize, batch by length, search, detokenize.

Works with `keras_transformer.data.SubwordTokenizer` (TensorFlow) or any
tokenizer with `tokenize(list_of_str)` (ragged ids, or lists of ids, without
BOS/EOS) and `detokenize(list_of_id_lists)` (strings or bytes). The model may
run on any Keras backend; the tokenizer runs eagerly outside the search.
"""

import numpy as np
from keras import ops

from keras_transformer.data.corpus import unpaired_surrogate
from keras_transformer.decoding.search import BOS_ID, EOS_ID, PAD_ID, beam_search, greedy_search


def _to_id_lists(tokens):
    """Ragged tensors, dense tensors or nested lists -> list of lists of ints."""
    if hasattr(tokens, "to_list"):  # tf.RaggedTensor
        return [[int(i) for i in row] for row in tokens.to_list()]
    if hasattr(tokens, "numpy"):
        tokens = tokens.numpy()
    return [[int(i) for i in row] for row in tokens]


def _to_strings(texts):
    if hasattr(texts, "numpy"):
        texts = texts.numpy()
    texts = np.asarray(texts, dtype=object).reshape(-1)
    return [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t) for t in texts]


class Translator:
    """A model and its tokenizer bundled for translating strings.

    Args:
        model: a `keras_transformer.Transformer`.
        tokenizer: e.g. `keras_transformer.data.SubwordTokenizer`.
        beam_size: 1 for greedy search, else beam search (the paper: 4).
        alpha: GNMT length penalty exponent (the paper: 0.6).
        max_extra_length: outputs stop after source length + this many tokens.
        max_length: optional cap on output lengths.
        max_source_length: sources are cut to this many ids, EOS included
            (default: no cut, except that a model with learned positions
            always cuts at its `max_length`, which has no positions beyond).
        batch_size: sentences per search call. Sentences are sorted by
            length before batching (less padding); outputs keep input order.
        jit_compile: compile the search with XLA (TensorFlow; faster on CPU).
        width_multiple: pad source widths up to a multiple of this (fewer
            distinct shapes to compile under JAX or XLA; padding changes no
            output).
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        beam_size=4,
        alpha=0.6,
        max_extra_length=50,
        max_length=None,
        max_source_length=None,
        batch_size=32,
        jit_compile=False,
        width_multiple=8,
    ):
        for name, value in (("beam_size", beam_size), ("batch_size", batch_size), ("width_multiple", width_multiple)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
        if max_source_length is not None and (
            isinstance(max_source_length, bool) or not isinstance(max_source_length, int) or max_source_length < 1
        ):
            raise ValueError(f"`max_source_length` must be an int >= 1 or None, got {max_source_length!r}.")
        self.model = model
        self.tokenizer = tokenizer
        self.beam_size = beam_size
        self.alpha = alpha
        self.max_extra_length = max_extra_length
        self.max_length = max_length
        if getattr(model, "positional_encoding", None) == "learned":
            # Longer sources (or padding) would index past the learned
            # position table, an error from deep inside the backend.
            max_source_length = min(max_source_length or model.max_length, model.max_length)
        self.max_source_length = max_source_length
        self.batch_size = batch_size
        self.jit_compile = jit_compile
        self.width_multiple = width_multiple
        self.bos_id = getattr(tokenizer, "bos_id", BOS_ID)
        self.eos_id = getattr(tokenizer, "eos_id", EOS_ID)
        self.pad_id = getattr(tokenizer, "pad_id", PAD_ID)

    def _search(self, source_ids):
        options = dict(
            max_extra_length=self.max_extra_length,
            max_length=self.max_length,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            jit_compile=self.jit_compile,
        )
        if self.beam_size == 1:
            return greedy_search(self.model, source_ids, **options)
        return beam_search(self.model, source_ids, beam_size=self.beam_size, alpha=self.alpha, **options)

    def source_ids(self, texts):
        """Token ids of each text followed by EOS (the training format), as lists."""
        sources = []
        for tokens in _to_id_lists(self.tokenizer.tokenize(list(texts))):
            if self.max_source_length is not None:
                tokens = tokens[: self.max_source_length - 1]
            sources.append(tokens + [self.eos_id])
        return sources

    def translate_ids(self, sources):
        """Lists of source ids (with EOS) -> (output id lists without EOS, scores)."""
        outputs, scores = [None] * len(sources), [None] * len(sources)
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            longest = max(len(sources[i]) for i in rows)
            width = -(-longest // self.width_multiple) * self.width_multiple
            if self.max_source_length is not None:
                # Padding counts as positions too (learned ones end there).
                width = max(longest, min(width, self.max_source_length))
            batch = np.full((len(rows), width), self.pad_id, dtype="int32")
            for position, index in enumerate(rows):
                batch[position, : len(sources[index])] = sources[index]
            result = self._search(batch)
            ids = ops.convert_to_numpy(result["ids"])
            lengths = ops.convert_to_numpy(result["lengths"])
            row_scores = ops.convert_to_numpy(result["scores"])
            for position, index in enumerate(rows):
                tokens = ids[position, : lengths[position]].tolist()
                if tokens and tokens[-1] == self.eos_id:
                    tokens = tokens[:-1]
                outputs[index] = tokens
                scores[index] = float(row_scores[position])
        return outputs, scores

    def translate(self, texts, return_scores=False):
        """Translates a string or a list of strings.

        Empty (or whitespace-only) strings translate to "" without decoding
        (score 0.0). A text that is not a `str`, or a `str` with an unpaired
        surrogate (not valid Unicode), raises an error naming `texts[i]`.
        With `return_scores`, returns `(translations, scores)`: beam scores
        are length-penalised log-probabilities, greedy scores the sum of
        log-probabilities.
        """
        single = isinstance(texts, str)
        if isinstance(texts, (bytes, bytearray)) or not (single or hasattr(texts, "__iter__")):
            raise TypeError(
                f"translate: `texts` must be a str or an iterable of str, got {type(texts).__name__}."
            )
        texts = [texts] if single else list(texts)
        for index, text in enumerate(texts):
            label = "texts" if single else f"texts[{index}]"
            if not isinstance(text, str):
                raise TypeError(f"translate: {label} is {type(text).__name__}, not str.")
            problem = unpaired_surrogate(text)
            if problem:
                raise ValueError(f"translate: {label} is not valid Unicode: {problem}.")
        translations, scores = [""] * len(texts), [0.0] * len(texts)
        to_decode = [i for i, text in enumerate(texts) if text.strip()]
        if to_decode:
            sources = self.source_ids([texts[i] for i in to_decode])
            outputs, output_scores = self.translate_ids(sources)
            decoded = _to_strings(self.tokenizer.detokenize(outputs))
            for index, text, score in zip(to_decode, decoded, output_scores):
                translations[index] = text
                scores[index] = score
        if single:
            translations, scores = translations[0], scores[0]
        return (translations, scores) if return_scores else translations

    __call__ = translate


def translate(
    model,
    tokenizer,
    texts,
    beam_size=4,
    alpha=0.6,
    max_extra_length=50,
    batch_size=32,
    **options,
):
    """Translates strings with beam search (greedy with `beam_size=1`).

    See `Translator` for the options; returns a list of strings in input
    order (a string for a string).
    """
    translator = Translator(
        model,
        tokenizer,
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
        batch_size=batch_size,
        **options,
    )
    return translator.translate(texts)
