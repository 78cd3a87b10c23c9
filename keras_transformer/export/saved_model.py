"""Export a trained translator with its tokenizer for TensorFlow Serving.

The export is a SavedModel built with Keras 3's `keras.export.ExportArchive`
on the TensorFlow backend, written to `BASE/NAME/VERSION/` (the layout TF
Serving watches). Signatures:

- `serving_default`: `text` (a batch of strings) -> `translations` (strings),
  `scores` (float32, the search's length-penalised log-probability) and
  `truncated` (bool: the input was cut to `max_input_length` ids, below).
  Tokenization (TF Text SentencePiece ops), beam search (`keras.ops` while
  loop, no XLA) and detokenization all run in the graph.
- `translate_ids`: `source_ids` (int32 (batch, length): a row's source is
  its ids before its first pad 0 or EOS) -> `ids` (int32 (batch, length),
  pad 0), `scores` and `truncated`, for clients that tokenize themselves.
  Rows that end with EOS (or pad) read the same under TF Serving's
  `pad_variable_length_inputs`, which pads with the request's first id.
- `translate_ids_with_lengths`: `source_ids` and `source_lengths` (int32
  (batch,)): `translate_ids` on each row's first `source_lengths` ids, for
  clients whose rows do not end with EOS.
- `translate_n_best` (beam search only): `text` -> `translations` and
  `scores`, `log_probs` (batch, beam_size), best first, and `counts` (how
  many slots hold a hypothesis; empty slots are "" with score 0) and
  `truncated`.
- `score`: `source` and `target` strings -> `log_probs`, length-penalised
  `scores` and `tokens` (EOS included) of each given translation (forced
  decoding), and `truncated` (the source was cut). A target longer than
  `max_input_length + max_extra_length` tokens (the longest translation the
  export makes; less for learned positions:
  `keras_transformer.decoding.inputs.target_length_limit`) fails the
  request with InvalidArgument naming the limit, as `Translator.score`
  refuses it: a cut target would be another sentence.

Beam size, length penalty and the length limits are fixed at export time.
Inputs longer than `max_input_length` tokens (EOS included) are truncated to
their first `max_input_length - 1` tokens (the rule of
`keras_transformer.decoding.inputs.truncate_source`), so no request can make the
server's work unbounded: a translation has at most `max_input_length +
max_extra_length` tokens (or `max_output_length`). Inputs without any token
(empty or whitespace-only strings) translate to "" with score 0. These are
the conventions of `keras_transformer.decoding.translate` with
`max_source_length=max_input_length`, so both give the same translations.

The version directory appears atomically: the SavedModel is written to a
hidden temporary directory beside it (TF Serving ignores names that are not
integers), checked, then renamed; a failed export leaves earlier versions as
they were and no partial version behind.

The signatures' graph code is `keras_transformer.export.signatures`.
"""

import errno
import os
import shutil
import tempfile

import keras
import tensorflow as tf

from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import phases
from keras_transformer.decoding.inputs import DEFAULT_MAX_SOURCE_LENGTH, source_length_limit
from keras_transformer.decoding.options import check_alpha, check_length_penalty, check_limit_rule
from keras_transformer.decoding.options import check_int
from keras_transformer.export.opcheck import check_serving_ops
from keras_transformer.export.signatures import (
    IDS_INPUT, IDS_LENGTHS_SIGNATURE, IDS_SIGNATURE, LENGTHS_INPUT, N_BEST_SIGNATURE, SCORE_SIGNATURE, SERVING_SIGNATURE, TEXT_INPUT,
    SignatureFunctions,
)
from keras_transformer.export import batching as batching_lib
from keras_transformer.export import export_info
from keras_transformer.export import quantize as quantize_lib
from keras_transformer.export import warmup as warmup_lib

__all__ = ["ExportDirectoryError", "export_saved_model", "next_version"]


EXPORT_INFO_PATH = export_info.EXPORT_INFO_PATH
TOKENIZER_PATH = export_info.TOKENIZER_PATH

_TEMP_PREFIX = ".tmp-export-"

# The default input limit (ids, EOS included): every path's default source limit.
DEFAULT_MAX_INPUT_LENGTH = DEFAULT_MAX_SOURCE_LENGTH

# The XLA variant pads requests to a power of two rows (at least 8) and
# source tokens (at least 16; keras_transformer.export.warmup).
XLA_MIN_ROWS = warmup_lib.XLA_MIN_ROWS
XLA_MIN_WIDTH = warmup_lib.XLA_MIN_WIDTH
# Row buckets per decoding phase of the XLA variant (`xla_phase_buckets`).
XLA_PHASE_BUCKETS = 1


class ExportDirectoryError(OSError):
    """The export directory cannot be created or written."""


# File-system failures while writing. Python reports them as OSError with an
# errno but no file name; TensorFlow's writers (variables, saved_model.pb) as
# an OpError (ResourceExhaustedError for a full disk) whose message ends with
# the C library's strerror text.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG)


def _write_errno(error):
    """The errno of a file-system failure in `error`, else None."""
    if isinstance(error, OSError):
        return error.errno
    if isinstance(error, tf.errors.OpError):
        for code in _WRITE_ERRNOS:
            if os.strerror(code) in error.message:
                return code
    return None


def _check_name(name):
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or name.startswith(".")
        or "/" in name
        or (os.sep != "/" and os.sep in name)
    ):
        raise ValueError(
            f"`name` must be a plain directory name (no path separator, not hidden), got {name!r}."
        )
    return name


def next_version(model_dir):
    """1 + the largest integer version directory in `model_dir` (1 if none)."""
    model_dir = os.fspath(model_dir)
    if not os.path.isdir(model_dir):
        return 1
    versions = [
        int(entry.name)
        for entry in os.scandir(model_dir)
        if entry.name.isdigit() and entry.is_dir()
    ]
    return max(versions, default=0) + 1


def _make_model_dir(model_dir):
    try:
        os.makedirs(model_dir, exist_ok=True)
    except OSError as error:
        raise ExportDirectoryError(
            error.errno, f"cannot create the export directory {model_dir!r}: {error.strerror}"
        ) from error
    if not os.path.isdir(model_dir):
        raise ExportDirectoryError(f"cannot export into {model_dir!r}: it is not a directory")


def _make_temp_dir(model_dir):
    """The temporary directory beside the versions (same file system: rename is atomic)."""
    try:
        return tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=model_dir)
    except OSError as error:
        raise ExportDirectoryError(
            error.errno, f"cannot write into the export directory {model_dir!r}: {error.strerror}"
        ) from error


def _check_compatible(model, tokenizer, max_input_length):
    if not isinstance(model, keras.Model) or not hasattr(model, "encode"):
        raise TypeError(
            f"`model` must be a keras_transformer.Transformer, got {type(model).__name__}."
        )
    for attribute in ("tokenize", "detokenize", "vocabulary_size"):
        if not hasattr(tokenizer, attribute):
            raise TypeError(
                f"`tokenizer` must be a keras_transformer.data.SubwordTokenizer "
                f"(no `{attribute}` on {type(tokenizer).__name__})."
            )
    if not isinstance(tokenizer, tf.Module):
        raise TypeError(
            "`tokenizer` must be a tf.Module (e.g. SubwordTokenizer) so that the "
            f"export can track it, got {type(tokenizer).__name__}."
        )
    if (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) != (PAD_ID, BOS_ID, EOS_ID):
        raise ValueError(
            f"the tokenizer's special ids (pad {tokenizer.pad_id}, bos {tokenizer.bos_id}, "
            f"eos {tokenizer.eos_id}) differ from the decoder's ({PAD_ID}, {BOS_ID}, {EOS_ID})."
        )
    if model.pad_id != PAD_ID:
        raise ValueError(f"the model's pad_id is {model.pad_id}, the tokenizer's is {PAD_ID}.")
    source_size = model.source_vocabulary_size or model.vocabulary_size
    # A Marian tokenizer's sides may differ (separate vocabularies); one vocabulary serves both otherwise.
    tokenizer_source_size = getattr(tokenizer, "source_vocabulary_size", tokenizer.vocabulary_size)
    if tokenizer.vocabulary_size > model.vocabulary_size or tokenizer_source_size > source_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocabulary_size} target and {tokenizer_source_size} source ids but "
            f"the model's vocabularies have {model.vocabulary_size} and {source_size}: they were not trained "
            "together."
        )
    if model.positional_encoding == "learned" and max_input_length > model.max_length:
        raise ValueError(
            f"`max_input_length`={max_input_length} exceeds the model's learned positions "
            f"(max_length={model.max_length})."
        )


def export_saved_model(
    model,
    tokenizer,
    base_dir,
    name="translator",
    version=None,
    *,
    beam_size=4,
    alpha=0.6,
    max_extra_length=50,
    max_input_length=None,
    max_output_length=None,
    limit_rule="fallback",
    length_penalty="gnmt",
    jit_compile=False,
    check_ops=True,
    warmup_rows=warmup_lib.DEFAULT_WARMUP_ROWS,
    xla_min_rows=None,
    xla_phase_buckets=None,
    finer_phases=False,
    quantize=None,
    shortlist=None,
    shortlist_size=None,
    verbose=False,
):
    """Writes `model` and `tokenizer` as a SavedModel for TensorFlow Serving.

    Args:
        model: a built `keras_transformer.Transformer` (TensorFlow backend).
        tokenizer: the `keras_transformer.data.SubwordTokenizer` it was
            trained with; it travels in the graph.
        base_dir: TF Serving's model base path parent; the export goes to
            `base_dir/name/version/`.
        name: the model name (TF Serving's `MODEL_NAME`).
        version: an int >= 0; None takes the next integer after the largest
            existing version (1 for the first). An existing version is never
            overwritten.
        beam_size: beams of the search (1: greedy search, raw log-probability
            scores).
        alpha: length penalty exponent.
        max_extra_length: a translation has at most its source's token count
            (EOS included) plus this many tokens.
        max_input_length: longer inputs are truncated to their first
            `max_input_length - 1` tokens, plus EOS. None: 256, or the
            model's `max_length` if smaller and its positions are learned
            (`keras_transformer.decoding.inputs.source_length_limit`:
            `Translator`'s default, so both give the same translations).
        max_output_length: optional hard cap on every translation's length.
        limit_rule: what becomes of a translation reaching its length limit
            without EOS (`keras_transformer.decoding.LIMIT_RULES`, as for
            `Translator`): baked into the signatures.
        length_penalty: how beams rank finished translations and the
            score signature normalises, "gnmt" (default) or "length" (as
            for `Translator`): baked into the signatures.
        jit_compile: the XLA variant: the search is compiled with XLA
            (`jit_compile=True`; tokenization stays outside), 2-3x faster
            on CPU, for TF Serving started with
            `--xla_cpu_compilation_enabled` and for GPU serving. Requests
            are padded to a power of two rows (at least `xla_min_rows`) and a multiple
            of 16 source tokens, so the server compiles one program per
            padded shape. False (default): the plain graph that any stock
            TF Serving runs.
        check_ops: run `check_serving_ops` on the export before publishing
            it (a subprocess that imports TensorFlow, a few seconds); the XLA
            variant is checked with `allow_xla=True`.
        warmup_rows: the export writes TF Serving warm-up records
            (`assets.extra/tf_serving_warmup_requests`): one request per
            signature and, for the XLA variant, one per padded (rows,
            source length) shape of requests of up to `warmup_rows` rows
            and `max_input_length` tokens, so that the server compiles them
            before it reports the version available. An int >= 1 (the
            records stay under TF Serving's 1,000 for any). It is also the
            `max_batch_size` of the server-side batching parameters the
            export writes (`assets.extra/batching_parameters.txt`,
            `keras_transformer.export.batching`; the XLA variant's: its
            largest row bucket).
        xla_min_rows: the XLA variant's smallest row bucket: 1, 2, 4 or 8
            (None: 8). Smaller buckets let a request of one sentence run
            one row instead of eight, at the price of more programs for
            the warm-up to compile (one per bucket and source length).
        xla_phase_buckets: the XLA variant drops the sentences that are
            done between decoding phases (the plain variant always does):
            each phase after the first decodes the smallest of this many
            row buckets (the request's padded rows, half, a quarter, ...)
            that holds the sentences not done. 1: every phase decodes the
            whole request. None: XLA_PHASE_BUCKETS. Each bucket is one more
            compiled copy of a phase's loop in every program (warm-up
            time); the outputs are the same.
        finer_phases: the plain variant decodes in finer phases
            (`phases.finer_phases`: a boundary every 8 positions up to 64,
            then 16), dropping done sentences at each: about a seventh more
            sentences a second on real text (benchmarks/README.md), the same
            outputs, a graph with three times the phases (longer to export
            and to load).
        quantize: None (float weights as trained), "int8" (the Dense
            kernels and the shared embedding stored as int8, activations
            quantized per row at run time), "int8_weights" (int8 kernels,
            float32 products) or "bfloat16" (weights and compute): see
            `keras_transformer.export.quantize`. A copy is quantized;
            `model` is unchanged. A model quantized already with
            `quantize_model` is exported as it is (leave this None).
        shortlist: a `keras_transformer.decoding.shortlist.Shortlist` (or
            its file's path), baked into the graph as constants: each
            request scores only its candidate target pieces. The plain
            variant computes the batch's list as it is
            (`keras_transformer.decoding.shortlisted.graph_stand_in`); the
            XLA variant pads it to `shortlist_size` entries (static shapes)
            and, for a batch whose list is longer, runs the full search
            instead (exact; `static_graph_stand_in`), and says so: its
            `serving_default` and `translate_ids*` signatures output
            `shortlist_overflow` (bool per row, the same for a batch).
        shortlist_size: the XLA variant's fixed candidate count with a
            shortlist: an int above the list's always-kept pieces; None:
            `Shortlist.default_size()`. At least the vocabulary: every
            request takes the full search.
        verbose: print the endpoints (Keras' export summary).

    Returns:
        The version directory (str).

    Raises:
        ExportDirectoryError: the directory cannot be created or written.
        FileExistsError: `version` already exists.
        ServingOpsError: the graph uses an op TF Serving cannot run.
    """
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "export_saved_model needs the TensorFlow backend (KERAS_BACKEND=tensorflow): "
            f"the current backend is {keras.backend.backend()!r}, whose SavedModel export "
            "would contain XlaCallModule ops that TF Serving cannot run without XLA."
        )
    _check_name(name)
    if version is not None:
        check_int("version", version, 0)
    check_int("beam_size", beam_size, 1)
    alpha = check_alpha(alpha)
    check_int("max_extra_length", max_extra_length, 0)
    check_limit_rule(limit_rule)
    check_length_penalty(length_penalty)
    if max_input_length is None:
        max_input_length = source_length_limit(model)  # Translator's default too
    check_int("max_input_length", max_input_length, 2)
    if max_output_length is not None:
        check_int("max_output_length", max_output_length, 1)
    _check_compatible(model, tokenizer, max_input_length)
    if xla_min_rows is None:
        xla_min_rows = XLA_MIN_ROWS
    elif not jit_compile:
        raise ValueError("`xla_min_rows` is the XLA variant's smallest row bucket: it needs jit_compile=True.")
    warmup_lib.check_min_rows(xla_min_rows)
    if xla_phase_buckets is None:
        xla_phase_buckets = XLA_PHASE_BUCKETS if jit_compile else 1
    elif not jit_compile:
        raise ValueError("`xla_phase_buckets` is the XLA variant's: it needs jit_compile=True (the plain variant "
                         "drops done sentences anyway).")
    check_int("xla_phase_buckets", xla_phase_buckets, 1)
    if finer_phases and jit_compile:
        raise ValueError("`finer_phases` is the plain variant's (jit_compile=False): the XLA variant drops done "
                         "sentences in row buckets (`xla_phase_buckets`).")
    warmup_lib.check_warmup_rows(warmup_rows)
    quantize_lib.check_mode(quantize)
    if shortlist_size is not None and (shortlist is None or not jit_compile):
        raise ValueError("`shortlist_size` is the XLA variant's fixed shortlist size: it needs `shortlist` and "
                         "jit_compile=True (the plain variant takes each batch's list as it is).")
    if shortlist is not None:
        from keras_transformer.decoding import shortlisted
        from keras_transformer.decoding.shortlist import Shortlist

        shortlist = Shortlist.coerce(shortlist)
        shortlisted.check_fits(shortlist, model)
        if jit_compile:
            shortlist_size = (shortlist.default_size() if shortlist_size is None
                              else shortlist.check_size(shortlist_size))
    if not model.built:
        model.build()
    if quantize is not None:
        model = quantize_lib.quantize_model(model, quantize)
    quantization = getattr(model, "keras_transformer_quantization", None)

    model_dir = os.path.join(os.fspath(base_dir), name)
    _make_model_dir(model_dir)
    if version is None:
        version = next_version(model_dir)
    version_dir = os.path.join(model_dir, str(version))
    if os.path.exists(version_dir):
        raise FileExistsError(
            f"{version_dir} already exists; export a new version (version=None picks the next)."
        )

    translator = SignatureFunctions(
        model, tokenizer, beam_size, float(alpha), max_extra_length, max_input_length,
        max_output_length, jit_compile=bool(jit_compile), limit_rule=limit_rule, shortlist=shortlist,
        shortlist_size=shortlist_size, length_penalty=length_penalty, xla_min_rows=xla_min_rows,
        xla_phase_buckets=xla_phase_buckets, finer_phases=bool(finer_phases),
    )
    temp_dir = _make_temp_dir(model_dir)
    try:
        # Every signature cuts its sources to max_input_length ids: its searches
        # need no phase for capacities past max_input_length + max_extra_length.
        with phases.source_width_at_most(max_input_length), phases.static_row_buckets(xla_phase_buckets), \
                phases.finer_phases(finer_phases):
            archive = _traced_archive(model, tokenizer, translator, beam_size)
        try:
            archive.write_out(temp_dir, verbose=verbose)
            export_info.write_export_info(temp_dir, model, tokenizer, translator, warmup_rows, quantization)
            signatures = [SERVING_SIGNATURE, IDS_SIGNATURE, IDS_LENGTHS_SIGNATURE, SCORE_SIGNATURE]
            if beam_size > 1:
                signatures.append(N_BEST_SIGNATURE)
            warmup_lib.write_warmup_records(temp_dir, name, warmup_lib.warmup_requests(
                signatures, jit_compile=bool(jit_compile), warmup_rows=warmup_rows,
                max_input_length=max_input_length, vocabulary_size=tokenizer.vocabulary_size, min_rows=xla_min_rows,
            ))
            batching_lib.write_batching_parameters(temp_dir, batching_lib.batching_parameters(
                jit_compile=bool(jit_compile), warmup_rows=warmup_rows, xla_min_rows=xla_min_rows))
        except (OSError, tf.errors.OpError) as error:
            code = _write_errno(error)
            if code is None:
                raise
            raise ExportDirectoryError(
                code,
                f"cannot write version {version} into the export directory {model_dir!r}: "
                f"{os.strerror(code)}; nothing was published and earlier versions are untouched",
            ) from error
        if check_ops:
            check_serving_ops(temp_dir, allow_xla=bool(jit_compile))
            quantize_lib.check_quantized_export(temp_dir, model)
        try:
            # Fails (instead of replacing) if the version appeared meanwhile.
            os.rename(temp_dir, version_dir)
        except OSError as error:
            raise ExportDirectoryError(
                error.errno, f"cannot publish the export as {version_dir!r}: {error.strerror}"
            ) from error
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return version_dir


def _traced_archive(model, tokenizer, translator, beam_size):
    """An `ExportArchive` of `model` with every signature of `translator` traced."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    # The tokenizer's SentencePiece model is an attribute of its graph ops;
    # tracking it keeps any resource it may hold in the export.
    archive.track(tokenizer)
    # The first endpoint becomes serving_default as well; naming it so
    # avoids a duplicate signature.
    _add_endpoint(
        archive, SERVING_SIGNATURE,
        translator.translate_text,
        input_signature=[tf.TensorSpec([None], tf.string, name=TEXT_INPUT)],
    )
    _add_endpoint(
        archive, IDS_SIGNATURE,
        translator.translate_ids,
        input_signature=[tf.TensorSpec([None, None], tf.int32, name=IDS_INPUT)],
    )
    _add_endpoint(
        archive, IDS_LENGTHS_SIGNATURE,
        translator.translate_ids_with_lengths,
        input_signature=[tf.TensorSpec([None, None], tf.int32, name=IDS_INPUT),
                         tf.TensorSpec([None], tf.int32, name=LENGTHS_INPUT)],
    )
    if beam_size > 1:
        _add_endpoint(
            archive, N_BEST_SIGNATURE,
            translator.translate_n_best,
            input_signature=[tf.TensorSpec([None], tf.string, name=TEXT_INPUT)],
        )
    _add_endpoint(
        archive, SCORE_SIGNATURE,
        translator.score,
        input_signature=[tf.TensorSpec([None], tf.string, name="source"),
                         tf.TensorSpec([None], tf.string, name="target")],
    )
    return archive


def _add_endpoint(archive, name, function, input_signature):
    """`archive.add_endpoint(name, function, input_signature=...)`, with
    `function` traced once instead of twice.

    Keras' `ExportArchive` traces each endpoint to list its variables, then
    `tf.saved_model.save` traces every `tf.function` it saves again (its
    cache key holds the save options): each signature's search would be
    traced twice, the larger part of an export's time. `function` is traced
    once, here (inside whatever `phases.source_width_at_most` the caller
    set), and both traces of the endpoint only call that trace.
    """
    traced = tf.function(function, input_signature=input_signature, autograph=False).get_concrete_function()

    def endpoint(*inputs):
        return traced(*inputs)

    archive.add_endpoint(name, endpoint, input_signature=input_signature)
