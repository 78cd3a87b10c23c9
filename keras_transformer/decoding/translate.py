"""Text in, text out: tokenize, batch by length, search, detokenize.

Works with `keras_transformer.data.SubwordTokenizer` (TensorFlow) or any
tokenizer with `tokenize(list_of_str)` (ragged ids, or lists of ids, without
BOS/EOS) and `detokenize(list_of_id_lists)` (strings or bytes). The model may
run on any Keras backend; the tokenizer runs eagerly outside the search.
"""

import warnings
from typing import NamedTuple, Optional

import numpy as np
from keras import ops

from keras_transformer.data.corpus import unpaired_surrogate
from keras_transformer.decoding.alignment import translation_alignments
from keras_transformer.decoding.inputs import check_target_lengths, source_length_limit, truncate_source
from keras_transformer.decoding.options import check_int, check_length_penalty
from keras_transformer.decoding.scoring import score_translations
from keras_transformer.decoding import shortlisted
from keras_transformer.decoding.shortlist import Shortlist
from keras_transformer.decoding.search import (
    beam_search,
    check_limit_rule,
    check_sampling_options,
    greedy_search,
    sampling_search,
)
from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID


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


class Hypothesis(NamedTuple):
    """One translation of one text: its string, length-penalised score (beam;
    greedy and sampling: the log-probability), log-probability, word
    alignment in Pharaoh format ("0-0 1-2 ...", source-target word indices)
    when asked for, and whether the text was cut to `max_source_length`
    ids before it was translated."""

    translation: str
    score: float
    log_prob: float
    alignment: Optional[str] = None
    truncated: bool = False


class Translator:
    """A model and its tokenizer bundled for translating strings.

    Args:
        model: a `keras_transformer.Transformer`.
        tokenizer: e.g. `keras_transformer.data.SubwordTokenizer`.
        beam_size: 1 for greedy search, else beam search (the paper: 4).
        alpha: length penalty exponent (the paper: 0.6).
        length_penalty: how beam search ranks finished hypotheses and
            `score` normalises: "gnmt" (default, the paper's: log P /
            ((5 + length) / 6) ** alpha) or "length" (Marian's and
            Transformers': log P / length ** alpha), the length counting
            EOS (`keras_transformer.decoding.penalty`).
        max_extra_length: outputs stop after source length + this many tokens.
        max_output_length: optional cap on output lengths (tokens, EOS
            included), as the SavedModel export's `max_output_length`.
        max_source_length: sources longer than this many ids (EOS
            included) are truncated, with a warning naming how many and
            which (`last_truncated` keeps their indices). Default: 256
            (`keras_transformer.decoding.inputs.DEFAULT_MAX_SOURCE_LENGTH`),
            the default of the SavedModel and CTranslate2 exports too, so
            a text gives the same output in process and served; pass a
            larger limit to cut later. A model with learned positions always
            cuts at its `max_length`, which has no positions beyond.
        batch_size: sentences per search call. Sentences are sorted by
            length before batching (less padding); outputs keep input order.
        jit_compile: compile the search with XLA (TensorFlow; faster on CPU).
        width_multiple: pad source widths up to a multiple of this (fewer
            distinct shapes to compile under JAX or XLA; padding changes no
            output).
        search: "beam", "greedy" or "sampling" (default: greedy when
            `beam_size` is 1, else beam).
        no_repeat_ngram_size: forbid any n-gram from appearing twice in an
            output (0: off).
        limit_rule: what becomes of an output reaching its length limit
            without EOS (`keras_transformer.decoding.LIMIT_RULES`):
            "fallback" (default) keeps it only when no hypothesis ended,
            "force_eos" ends it with EOS, "finish" (CTranslate2's rule)
            lets it compete as it is.
        temperature, top_k, top_p, seed: the sampling search's options
            (`keras_transformer.decoding.sampling_search`); each batch draws
            with `seed` + its index, so a seed reproduces a whole call.
        shortlist: a `keras_transformer.decoding.shortlist.Shortlist` (or
            the path of its file): each batch scores only its candidate
            target pieces (`keras_transformer.decoding.shortlisted`).
            Default: the whole vocabulary.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        beam_size=4,
        alpha=0.6,
        max_extra_length=50,
        max_output_length=None,
        max_source_length=None,
        batch_size=32,
        jit_compile=False,
        width_multiple=8,
        search=None,
        no_repeat_ngram_size=0,
        limit_rule="fallback",
        length_penalty="gnmt",
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        seed=None,
        shortlist=None,
    ):
        for name, value in (("beam_size", beam_size), ("batch_size", batch_size), ("width_multiple", width_multiple)):
            check_int(name, value, 1)
        if max_source_length is not None and (
            isinstance(max_source_length, bool) or not isinstance(max_source_length, int) or max_source_length < 2
        ):
            raise ValueError(f"`max_source_length` must be an int >= 2 (a token and EOS) or None, "
                             f"got {max_source_length!r}.")
        # Bad sampling options fail here, naming the argument, not at the first search.
        check_sampling_options(temperature, top_k, top_p, seed)
        self.limit_rule = check_limit_rule(limit_rule)
        self.length_penalty = check_length_penalty(length_penalty)
        if search is None:
            search = "greedy" if beam_size == 1 else "beam"
        if search not in ("beam", "greedy", "sampling"):
            raise ValueError(f"`search` must be 'beam', 'greedy' or 'sampling', got {search!r}.")
        self.model = model
        self.tokenizer = tokenizer
        self.beam_size = beam_size
        self.alpha = alpha
        self.max_extra_length = max_extra_length
        self.max_output_length = max_output_length
        # Longer sources (or padding) would index past a learned position table.
        self.max_source_length = source_length_limit(model, max_source_length)
        self.batch_size = batch_size
        self.jit_compile = jit_compile
        self.width_multiple = width_multiple
        self.search = search
        self.no_repeat_ngram_size = no_repeat_ngram_size
        self.sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p)
        self.seed = seed
        self.bos_id = getattr(tokenizer, "bos_id", BOS_ID)
        self.eos_id = getattr(tokenizer, "eos_id", EOS_ID)
        self.pad_id = getattr(tokenizer, "pad_id", PAD_ID)
        self.last_truncated = []
        self.shortlist = Shortlist.coerce(shortlist)

    # -- ids ----------------------------------------------------------------

    def _search(self, source_ids, prefix_ids=None, all_beams=False, batch_index=0, beam_size=None):
        options = dict(
            max_extra_length=self.max_extra_length,
            max_output_length=self.max_output_length,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            jit_compile=self.jit_compile,
            prefix_ids=prefix_ids,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
            limit_rule=self.limit_rule,
        )
        if self.search == "greedy":
            function = greedy_search
        elif self.search == "sampling":
            function = sampling_search
            options.update(self.sampling, seed=None if self.seed is None else self.seed + batch_index)
        else:
            function = beam_search
            options.update(beam_size=beam_size or self.beam_size, alpha=self.alpha, return_all_beams=all_beams,
                           length_penalty=self.length_penalty)
        if self.shortlist is not None:
            return shortlisted.search(function, self.model, self.shortlist, source_ids, **options)
        return function(self.model, source_ids, **options)

    def token_ids(self, texts):
        """Token ids of each text (no BOS/EOS), as lists."""
        return _to_id_lists(self.tokenizer.tokenize(list(texts)))

    def target_token_ids(self, texts):
        """Token ids of each target text (no BOS/EOS), as lists: the
        tokenizer's `tokenize_target` where it has one (a Marian model
        segments its targets with their own model), else `tokenize`."""
        tokenize = getattr(self.tokenizer, "tokenize_target", self.tokenizer.tokenize)
        return _to_id_lists(tokenize(list(texts)))

    def source_ids(self, texts):
        """Token ids of each text followed by EOS (the training format), as
        lists, cut to `max_source_length` (see `last_truncated`)."""
        return self._with_eos(self.token_ids(texts))

    def _with_eos(self, token_lists, indices=None, count=None):
        """Sources with EOS; `indices` are the texts' own indices (for the
        warning and `last_truncated`), `count` the number of texts given."""
        indices = range(len(token_lists)) if indices is None else indices
        sources, self.last_truncated = [], []
        for index, tokens in zip(indices, token_lists):
            source, cut = truncate_source(tokens, self.max_source_length, self.eos_id)
            if cut:
                self.last_truncated.append(index)
            sources.append(source)
        if self.last_truncated:
            shown = ", ".join(str(i) for i in self.last_truncated[:10])
            more = ", ..." if len(self.last_truncated) > 10 else ""
            warnings.warn(
                f"{len(self.last_truncated)} of {count or len(token_lists)} sources are longer than "
                f"max_source_length={self.max_source_length} tokens (EOS included) and were truncated: "
                f"texts[{shown}{more}].",
                stacklevel=3,
            )
        return sources

    def _padded(self, rows, lists, width_multiple):
        longest = max(max(len(lists[i]) for i in rows), 1)
        width = -(-longest // width_multiple) * width_multiple
        if self.max_source_length is not None:
            # Padding counts as positions too (learned ones end there).
            width = max(longest, min(width, self.max_source_length))
        batch = np.full((len(rows), width), self.pad_id, dtype="int32")
        for position, index in enumerate(rows):
            batch[position, : len(lists[index])] = lists[index]
        return batch

    def decode_ids(self, sources, prefixes=None, n_best=1, beam_size=None):
        """Lists of source ids (with EOS) -> for each source, its `n_best`
        best hypotheses as (ids without EOS, score, log-probability), best
        first (the raw hypotheses: two may detokenize alike). `beam_size`
        overrides the translator's."""
        beam_size = beam_size or self.beam_size
        self._check_n_best(n_best, beam_size)
        results = [None] * len(sources)
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        for batch_index, start in enumerate(range(0, len(order), self.batch_size)):
            rows = order[start : start + self.batch_size]
            prefix_batch = None if prefixes is None else self._padded(rows, prefixes, 1)
            result = self._search(self._padded(rows, sources, self.width_multiple), prefix_batch,
                                  all_beams=n_best > 1, batch_index=batch_index, beam_size=beam_size)
            ids, lengths, scores, log_probs = (
                ops.convert_to_numpy(result[key]) for key in ("ids", "lengths", "scores", "log_probs")
            )
            if n_best == 1 or ids.ndim == 2:
                ids, lengths, scores, log_probs = ids[:, None], lengths[:, None], scores[:, None], log_probs[:, None]
            for position, index in enumerate(rows):
                hypotheses = []
                for k in range(n_best):
                    if not np.isfinite(scores[position, k]):
                        break  # fewer finished hypotheses than asked for
                    tokens = ids[position, k, : lengths[position, k]].tolist()
                    if tokens and tokens[-1] == self.eos_id:
                        tokens = tokens[:-1]
                    hypotheses.append((tokens, float(scores[position, k]), float(log_probs[position, k])))
                results[index] = hypotheses
        return results

    def _check_n_best(self, n_best, beam_size):
        if n_best > 1 and (self.search != "beam" or n_best > beam_size):
            raise ValueError(
                f"`n_best`={n_best} needs beam search with beam_size >= {n_best} "
                f"(search is {self.search!r}, beam_size {beam_size})."
            )

    def _texts_of(self, decoded):
        """The detokenized text of every hypothesis of `decode_ids`, per source."""
        flat = [tokens for row in decoded for tokens, _, _ in row]
        strings = _to_strings(self.tokenizer.detokenize(flat)) if flat else []
        texts, position = [], 0
        for row in decoded:
            texts.append(strings[position : position + len(row)])
            position += len(row)
        return texts

    def decode_distinct(self, sources, prefixes=None, n_best=1):
        """For each source, up to `n_best` hypotheses of distinct texts, as
        (hypotheses, texts): the best-scored segmentation of each text.

        The translator's beam comes first (its best hypothesis is what
        `translate` returns); a source with fewer distinct texts than
        `n_best` is searched again with a beam twice as wide (up to four
        times max(beam_size, n_best)), and its new texts join the others
        after the translation, all best first.
        """
        self._check_n_best(n_best, self.beam_size)
        kept, seen = [[] for _ in sources], [set() for _ in sources]

        def add(row, hypotheses, texts):
            for hypothesis, text in zip(hypotheses, texts):
                if text not in seen[row] and len(kept[row]) < n_best:
                    seen[row].add(text)
                    kept[row].append((hypothesis, text))

        beam_size = self.beam_size
        decoded = self.decode_ids(sources, prefixes, n_best=beam_size)
        for row, texts in enumerate(self._texts_of(decoded)):
            add(row, decoded[row], texts)
        while 2 * beam_size <= 4 * max(self.beam_size, n_best):
            short = [row for row in range(len(sources)) if len(kept[row]) < n_best]
            if not short:
                break
            beam_size *= 2
            wider = self.decode_ids([sources[row] for row in short],
                                    None if prefixes is None else [prefixes[row] for row in short],
                                    n_best=beam_size, beam_size=beam_size)
            for row, hypotheses, texts in zip(short, wider, self._texts_of(wider)):
                add(row, hypotheses, texts)
        # The translation first, then the others best first (a wider beam's text may outscore one).
        kept = [row[:1] + sorted(row[1:], key=lambda pair: -pair[0][1]) for row in kept]
        return [[h for h, _ in row] for row in kept], [[t for _, t in row] for row in kept]

    def translate_ids(self, sources):
        """Lists of source ids (with EOS) -> (output id lists without EOS, scores)."""
        best = [hypotheses[0] for hypotheses in self.decode_ids(sources)]
        return [tokens for tokens, _, _ in best], [score for _, score, _ in best]

    # -- text ---------------------------------------------------------------

    def _check_texts(self, texts, name="texts"):
        single = isinstance(texts, str)
        if isinstance(texts, (bytes, bytearray)) or not (single or hasattr(texts, "__iter__")):
            raise TypeError(
                f"translate: `{name}` must be a str or an iterable of str, got {type(texts).__name__}."
            )
        texts = [texts] if single else list(texts)
        for index, text in enumerate(texts):
            label = name if single else f"{name}[{index}]"
            if not isinstance(text, str):
                raise TypeError(f"translate: {label} is {type(text).__name__}, not str.")
            problem = unpaired_surrogate(text)
            if problem:
                raise ValueError(f"translate: {label} is not valid Unicode: {problem}.")
        return texts, single

    def translate(self, texts, return_scores=False, *, n_best=None, prefixes=None, return_alignments=False,
                  distinct=True):
        """Translates a string or a list of strings.

        A text without any token (empty, whitespace, or only characters the
        tokenizer drops, such as a byte-order mark) translates to "" without
        decoding (score 0.0), as in the exported SavedModel. A text that is
        not a `str`, or a `str` with an unpaired surrogate (not valid
        Unicode), raises an error naming `texts[i]`.

        Args:
            return_scores: also return the scores: `(translations, scores)`;
                beam scores are length-penalised log-probabilities, greedy
                and sampling scores the sum of log-probabilities.
            n_best: return the N best hypotheses of each text (N <= the
                beam size), as lists of `Hypothesis`: by default of
                distinct texts, the best-scored segmentation of each
                (`decode_distinct`; fewer than N only if a beam four times
                as wide finds no more), the first being the translation.
            distinct: False returns the raw N best hypotheses instead, best
                first, of which two may detokenize to the same text.
            prefixes: a target prefix per text ("" or None: none), forced at
                the start of its translation; decoding continues from it.
            return_alignments: return `Hypothesis` records with Pharaoh word
                alignments from the last decoder layer's cross-attention
                (heads averaged).

        Returns:
            Strings (a string for a string); with `n_best` or
            `return_alignments`, a `Hypothesis` per text (a list of `n_best`
            of them with `n_best`).
        """
        texts, single = self._check_texts(texts)
        if prefixes is not None:
            prefixes = [prefixes] if single and isinstance(prefixes, str) else list(prefixes)
            if len(prefixes) != len(texts):
                raise ValueError(f"translate: {len(prefixes)} prefixes for {len(texts)} texts.")
            prefixes = ["" if p is None else p for p in prefixes]
            self._check_texts(prefixes, "prefixes")
        if n_best is not None and (isinstance(n_best, bool) or not isinstance(n_best, int) or n_best < 1):
            raise ValueError(f"`n_best` must be an int >= 1, got {n_best!r}.")
        count = n_best or 1
        hypotheses = [[Hypothesis("", 0.0, 0.0, "" if return_alignments else None)] for _ in texts]
        token_lists = self.token_ids(texts)
        # Emptiness by token count, the export's rule: a text of dropped
        # characters has no tokens and nothing to translate.
        to_decode = [i for i, tokens in enumerate(token_lists) if tokens]
        if to_decode:
            sources = self._with_eos([token_lists[i] for i in to_decode], to_decode, len(texts))
            prefix_ids = None
            if prefixes is not None:
                prefix_ids = self.target_token_ids([prefixes[i] for i in to_decode])
            if count > 1 and distinct:
                decoded, strings = self.decode_distinct(sources, prefix_ids, n_best=count)
            else:
                decoded = self.decode_ids(sources, prefix_ids, n_best=count)
                strings = self._texts_of(decoded)
            alignments = translation_alignments(self, sources, decoded) if return_alignments else None
            cut = set(self.last_truncated)
            for row, index in enumerate(to_decode):
                hypotheses[index] = []
                for k, (_, score, log_prob) in enumerate(decoded[row]):
                    alignment = alignments[row][k] if alignments else None
                    hypotheses[index].append(Hypothesis(strings[row][k], score, log_prob, alignment, index in cut))
        else:
            self.last_truncated = []
        if n_best is not None or return_alignments:
            results = hypotheses if n_best is not None else [h[0] for h in hypotheses]
            return results[0] if single else results
        translations = [h[0].translation for h in hypotheses]
        scores = [h[0].score for h in hypotheses]
        if single:
            translations, scores = translations[0], scores[0]
        return (translations, scores) if return_scores else translations

    __call__ = translate

    def score(self, sources, targets, per_token=False):
        """Log-probabilities of given translations (forced decoding).

        Returns one dict per pair: "log_prob" (the target tokens and EOS),
        "tokens" (their count, EOS included), "score" (log_prob over this
        translator's length penalty and alpha), and with `per_token`,
        "token_log_probs". Batched and length-sorted like `translate`. An
        empty source or target is scored as it is (EOS alone). Sources are
        cut as `translate` cuts them (`last_truncated`); a target longer
        than `inputs.target_length_limit` (max_source_length +
        max_extra_length tokens, less for learned positions) raises a
        ValueError naming it and the limit: a cut target would be another
        sentence.
        """
        sources, _ = self._check_texts(sources, "sources")
        targets, _ = self._check_texts(targets, "targets")
        if len(sources) != len(targets):
            raise ValueError(f"score: {len(sources)} sources but {len(targets)} targets.")
        target_ids = self.target_token_ids(targets)
        check_target_lengths(target_ids, self.model, self.max_source_length, self.max_extra_length)
        source_ids = self.source_ids(sources)
        results = [None] * len(sources)
        order = sorted(range(len(sources)), key=lambda i: (len(source_ids[i]), len(target_ids[i])))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            scored = score_translations(
                self.model, self._padded(rows, source_ids, self.width_multiple),
                self._padded(rows, target_ids, 1) if any(target_ids[i] for i in rows)
                else np.full((len(rows), 1), self.pad_id, "int32"),
                alpha=self.alpha, bos_id=self.bos_id, eos_id=self.eos_id, pad_id=self.pad_id,
                length_penalty=self.length_penalty,
            )
            values = {key: ops.convert_to_numpy(value) for key, value in scored.items()}
            for position, index in enumerate(rows):
                length = int(values["lengths"][position])
                result = {"log_prob": float(values["log_probs"][position]), "tokens": length,
                          "score": float(values["scores"][position])}
                if per_token:
                    result["token_log_probs"] = values["token_log_probs"][position, :length].tolist()
                results[index] = result
        return results


def translate(
    model,
    tokenizer,
    texts,
    beam_size=4,
    alpha=0.6,
    max_extra_length=50,
    batch_size=32,
    *,
    return_scores=False,
    n_best=None,
    prefixes=None,
    return_alignments=False,
    **options,
):
    """Translates strings with beam search (greedy with `beam_size=1`):
    `Translator(model, tokenizer, ...).translate(texts, ...)` in one call.

    `options` are `Translator`'s (search, sampling, limits, ...);
    `return_scores`, `n_best`, `prefixes` and `return_alignments` are
    `Translator.translate`'s and shape the result as there: a list of
    strings in input order (a string for a string), `(translations,
    scores)` with `return_scores`, `Hypothesis` records with `n_best` or
    `return_alignments`. To translate several times or to score given
    translations, build a `Translator` once (each call here builds one).
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
    return translator.translate(texts, return_scores, n_best=n_best, prefixes=prefixes,
                                return_alignments=return_alignments)
