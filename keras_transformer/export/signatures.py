"""The exported module's graph functions: what each SavedModel signature computes.

`keras_transformer.export.saved_model` documents the signatures and drives
the export; this module holds their TensorFlow graph code (tokenize, search,
detokenize; forced-decoding scores; ids in, ids out), traced by Keras'
`ExportArchive`. TensorFlow backend only.
"""

import tensorflow as tf

from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.decoding import beam_search, greedy_search, shortlisted
from keras_transformer.decoding.inputs import describe_target_limit, source_tokens_kept, target_length_limit
from keras_transformer.decoding.scoring import score_translations
from keras_transformer.export import warmup as warmup_lib

SERVING_SIGNATURE = "serving_default"
IDS_SIGNATURE = "translate_ids"
IDS_LENGTHS_SIGNATURE = "translate_ids_with_lengths"
N_BEST_SIGNATURE = "translate_n_best"
SCORE_SIGNATURE = "score"
TEXT_INPUT = "text"
IDS_INPUT = "source_ids"
LENGTHS_INPUT = "source_lengths"


class SignatureFunctions:
    """The graph functions behind the signatures (traced by ExportArchive)."""

    def __init__(self, model, tokenizer, beam_size, alpha, max_extra_length, max_input_length,
                 max_output_length, jit_compile=False, limit_rule="fallback", shortlist=None, shortlist_size=None,
                 length_penalty="gnmt", xla_min_rows=warmup_lib.XLA_MIN_ROWS, xla_phase_buckets=1,
                 finer_phases=False):
        self.xla_min_rows = xla_min_rows
        # Traced under phases.static_row_buckets(xla_phase_buckets) and phases.finer_phases(finer_phases)
        # by the export.
        self.xla_phase_buckets, self.finer_phases = xla_phase_buckets, finer_phases
        self.limit_rule = limit_rule
        self.length_penalty = length_penalty
        self.shortlist = shortlist
        # The XLA variant's fixed candidate count (static shapes); None without a shortlist or XLA.
        self.shortlist_size = shortlist_size
        self.jit_compile = jit_compile
        # XLA specialises per shape: a few padded shapes, compiled once each.
        self._xla_search = tf.function(self._search_ops, jit_compile=True, autograph=False,
                                       reduce_retracing=True) if jit_compile else None
        # The plain variant's search, one graph function that `translate_text`
        # and `translate_ids` (and, with beams, `translate_n_best`) all call:
        # traced once for the signatures instead of once inside each (a
        # beam search's trace is about a third of a plain export's time).
        # With beams it keeps every finished hypothesis: the best is their
        # first (what beam_search returns without return_all_beams).
        # Autograph off, as Keras' export traces.
        self._plain_search = None if jit_compile else tf.function(
            self._search_ops if beam_size == 1 else self._kept_hypotheses_ops,
            input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
        self.model = model
        self.tokenizer = tokenizer
        self.beam_size = beam_size
        self.alpha = alpha
        self.max_extra_length = max_extra_length
        self.max_input_length = max_input_length
        self.max_output_length = max_output_length
        self.vocabulary_size = tokenizer.vocabulary_size

    def source_ids(self, tokens):
        """Ragged token ids (no specials) -> (batch, length) int32: tokens, EOS, pad.

        Rows are cut to `max_input_length - 1` tokens so that, with EOS, no
        source exceeds `max_input_length` (the training pipeline's convention).
        """
        tokens = tokens[:, : source_tokens_kept(self.max_input_length)]  # the one truncation rule
        lengths = tf.cast(tokens.row_lengths(), tf.int32)
        dense = tokens.to_tensor(default_value=PAD_ID)
        # One more column so that the longest row has room for its EOS.
        dense = tf.pad(dense, [[0, 0], [0, 1]], constant_values=PAD_ID)
        columns = tf.range(tf.shape(dense)[1], dtype=tf.int32)
        return tf.where(columns[tf.newaxis, :] == lengths[:, tf.newaxis], EOS_ID, dense)

    def truncated(self, tokens):
        """Per row of ragged token ids, whether `source_ids` cuts it (the one rule's test)."""
        return tokens.row_lengths() > source_tokens_kept(self.max_input_length)

    def _search_model(self, source_ids):
        """The model, or with a shortlist its stand-in over this batch's candidates."""
        if self.shortlist is None:
            return self.model
        return shortlisted.graph_stand_in(self.model, self.shortlist, source_ids)

    def _search_ops(self, source_ids):
        """The search's ops, for the caller's graph (XLA layout when compiled with XLA)."""
        if self.shortlist_size is None or self.shortlist_size >= self.model.vocabulary_size:
            return self._run_search(self._search_model(source_ids) if self.shortlist_size is None else self.model,
                                    source_ids)
        # XLA with a shortlist: the batch's candidates padded to the fixed
        # size, or, when their union exceeds it, the full search (exact, never
        # a cut list). Both searches are branches of one program per padded
        # shape, so the warm-up records that compile it compile the fallback.
        model, count = shortlisted.static_graph_stand_in(self.model, self.shortlist, source_ids,
                                                         self.shortlist_size)

        def listed():
            ids, scores = self._run_search(model, source_ids)
            return tf.gather(model.candidate_ids, ids), scores  # shortlist positions -> target ids

        overflow = count > self.shortlist_size
        ids, scores = tf.cond(overflow, lambda: self._run_search(self.model, source_ids), listed)
        # Reported to the client (`shortlist_overflow`): the fallback costs the full vocabulary's time.
        return ids, scores, overflow

    def _run_search(self, model, source_ids):
        options = dict(max_extra_length=self.max_extra_length, max_output_length=self.max_output_length,
                       jit_compile=self.jit_compile, limit_rule=self.limit_rule)
        if self.beam_size == 1:
            result = greedy_search(model, source_ids, **options)
        else:
            result = beam_search(model, source_ids, beam_size=self.beam_size, alpha=self.alpha,
                                 length_penalty=self.length_penalty, **options)
        return tf.convert_to_tensor(result["ids"]), tf.convert_to_tensor(result["scores"])

    def _kept_hypotheses_ops(self, source_ids):
        """The kept finished hypotheses of the beam search, best first, (batch, beam_size, ...): the plain
        variant's one search, and the XLA variant's n-best (in a plain graph)."""
        result = beam_search(
            self._search_model(source_ids), source_ids, beam_size=self.beam_size, alpha=self.alpha,
            max_extra_length=self.max_extra_length, max_output_length=self.max_output_length, return_all_beams=True,
            limit_rule=self.limit_rule, length_penalty=self.length_penalty,
        )
        return {key: tf.convert_to_tensor(value) for key, value in result.items()}

    @property
    def reports_overflow(self):
        """Whether the search has a fixed-size shortlist whose overflow the signatures report."""
        return self.shortlist_size is not None and self.shortlist_size < self.model.vocabulary_size

    def search(self, source_ids):
        """(ids, scores, overflow): overflow a scalar bool, whether the batch's shortlist overflowed its fixed
        size and the full search ran (None without a fixed-size list)."""
        if not self.jit_compile:
            if self.beam_size == 1:
                return (*self._plain_search(source_ids), None)
            kept = self._plain_search(source_ids)
            return kept["ids"][:, 0], kept["scores"][:, 0], None
        # Pad the batch to a power of two rows and source tokens (pad columns
        # are masked; extra rows are EOS-only sources, dropped after), so a
        # server compiles a handful of shapes, each warmed up by the export's
        # warm-up records.
        rows = tf.shape(source_ids)[0]
        result = self._xla_search(warmup_lib.pad_for_xla(source_ids, self.max_input_length, self.xla_min_rows))
        return result[0][:rows], result[1][:rows], (result[2] if self.reports_overflow else None)

    def search_tokens(self, tokens):
        """Ragged token ids -> (ids, scores, {"shortlist_overflow": per row} or {}); a row without tokens gives
        no ids and score 0.

        An empty or whitespace-only input has no tokens: like the in-process
        `keras_transformer.decoding.translate`, it translates to "" (its row
        is still searched with the batch, and the result discarded).
        """
        ids, scores, overflow = self.search(self.source_ids(tokens))
        has_tokens = tokens.row_lengths() > 0
        ids = tf.where(has_tokens[:, tf.newaxis], ids, PAD_ID)
        scores = tf.where(has_tokens, scores, 0.0)
        # One list per batch: every row of it took the same branch.
        extra = {} if overflow is None else {"shortlist_overflow": tf.broadcast_to(overflow, tf.shape(scores))}
        return ids, scores, extra

    def translate_text(self, text):
        tokens = self.tokenizer.tokenize(text)
        ids, scores, extra = self.search_tokens(tokens)
        translations = self.tokenizer.detokenize(ids)
        # SentencePiece already replaces invalid byte sequences (byte-fallback
        # pieces in a bad order) with U+FFFD; this keeps the guarantee explicit.
        translations = tf.strings.unicode_transcode(
            translations, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        return {"translations": translations, "scores": scores, "truncated": self.truncated(tokens), **extra}

    def translate_n_best(self, text):
        """The kept finished hypotheses of the beam search, best first: (batch, beam_size)."""
        tokens = self.tokenizer.tokenize(text)
        source_ids = self.source_ids(tokens)
        # The plain variant shares its search with translate_text; the XLA
        # variant's n-best runs in a plain graph, as its own search.
        result = self._kept_hypotheses_ops(source_ids) if self.jit_compile else self._plain_search(source_ids)
        ids = result["ids"]
        batch, width = tf.shape(ids)[0], tf.shape(ids)[2]
        translations = self.tokenizer.detokenize(tf.reshape(ids, [batch * self.beam_size, width]))
        translations = tf.strings.unicode_transcode(
            translations, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        translations = tf.reshape(translations, [batch, self.beam_size])
        # A slot is empty when the search finished fewer hypotheses, or the
        # text has no tokens (translated to "" with score 0, as in process).
        filled = (result["lengths"] > 0) & (tokens.row_lengths() > 0)[:, tf.newaxis]
        return {
            "translations": tf.where(filled, translations, ""),
            "scores": tf.where(filled, result["scores"], 0.0),
            "log_probs": tf.where(filled, result["log_probs"], 0.0),
            "counts": tf.reduce_sum(tf.cast(filled, tf.int32), axis=1),
            "truncated": self.truncated(tokens),
        }

    def score(self, source, target):
        """Forced decoding: log P(target | source), as `Translator.score`."""
        source_tokens = self.tokenizer.tokenize(source)
        source_ids = self.source_ids(source_tokens)
        target_tokens = getattr(self.tokenizer, "tokenize_target", self.tokenizer.tokenize)(target)
        # A longer target is refused, never cut (a cut one is another sentence).
        limits = (self.model, self.max_input_length, self.max_extra_length)
        refuse = tf.debugging.assert_less_equal(
            target_tokens.row_lengths(), tf.constant(target_length_limit(*limits), tf.int64),
            message=f"score: a target holds more than {describe_target_limit(*limits)}; it is refused "
                    "rather than scored cut. Target lengths in tokens, per row:",
            summarize=16,
        )
        with tf.control_dependencies([refuse]):
            target_ids = tf.identity(target_tokens.to_tensor(default_value=PAD_ID))
        target_ids = tf.pad(target_ids, [[0, 0], [0, 1]], constant_values=PAD_ID)  # at least one column
        scored = score_translations(self.model, source_ids, target_ids, alpha=self.alpha,
                                    length_penalty=self.length_penalty)
        return {
            "log_probs": tf.convert_to_tensor(scored["log_probs"]),
            "scores": tf.convert_to_tensor(scored["scores"]),
            "tokens": tf.cast(scored["lengths"], tf.int32),
            "truncated": self.truncated(source_tokens),
        }

    def translate_ids(self, source_ids):
        """A row's source is its ids before its first pad or EOS (BOS dropped).

        What follows a row's first pad or EOS is padding, whatever its ids:
        TF Serving's batching with `pad_variable_length_inputs` widens each
        request with the request's first id, not 0 (tensorflow/serving issue
        1279; `batching_util.cc`: `pad_value(input.flat<T>()(0))`), so a
        client whose rows all end with EOS (or a pad) gets the same text
        batched or not. In a row without either, nothing marks where the
        server's padding begins: such clients send `source_lengths`
        (`translate_ids_with_lengths`).
        """
        return self._translate_id_rows(tf.cast(source_ids, tf.int32))

    def _translate_id_rows(self, source_ids):
        ended = tf.math.cumsum(tf.cast((source_ids == PAD_ID) | (source_ids == EOS_ID), tf.int32), axis=1) > 0
        tokens = tf.ragged.boolean_mask(source_ids, ~ended & (source_ids != BOS_ID))
        # Unknown ids become UNK instead of failing the embedding lookup.
        in_range = (tokens >= 0) & (tokens < self.vocabulary_size)
        tokens = tf.ragged.map_flat_values(
            lambda values, valid: tf.where(valid, values, UNK_ID), tokens, in_range
        )
        ids, scores, extra = self.search_tokens(tokens)
        # The translation's tokens only: EOS and what follows become pad.
        before_eos = tf.math.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 0
        ids = tf.where(before_eos, ids, PAD_ID)
        return {"ids": ids, "scores": scores, "truncated": self.truncated(tokens), **extra}

    def translate_ids_with_lengths(self, source_ids, source_lengths):
        """`translate_ids` on each row's first `source_lengths` ids: the
        rest of the row is ignored, whatever the server padded it with."""
        source_ids = tf.cast(source_ids, tf.int32)
        lengths = tf.cast(source_lengths, tf.int32)
        shape = tf.shape(source_ids)
        checks = [
            tf.debugging.assert_equal(tf.shape(lengths)[0], shape[0], message=(
                f"{IDS_LENGTHS_SIGNATURE}: `{LENGTHS_INPUT}` needs one length per row of `{IDS_INPUT}`; "
                "lengths, rows:"), summarize=2),
            tf.debugging.assert_non_negative(lengths, message=(
                f"{IDS_LENGTHS_SIGNATURE}: `{LENGTHS_INPUT}` holds a negative length:"), summarize=16),
            tf.debugging.assert_less_equal(lengths, shape[1], message=(
                f"{IDS_LENGTHS_SIGNATURE}: a length in `{LENGTHS_INPUT}` exceeds the width of `{IDS_INPUT}`; "
                "lengths, width:"), summarize=16),
        ]
        with tf.control_dependencies(checks):
            columns = tf.range(shape[1], dtype=tf.int32)
        source_ids = tf.where(columns[tf.newaxis, :] < lengths[:, tf.newaxis], source_ids, PAD_ID)
        return self._translate_id_rows(source_ids)
