"""TF Serving warm-up records and the XLA variant's padded request shapes.

TF Serving replays `assets.extra/tf_serving_warmup_requests` (a TFRecord file
of `tensorflow.serving.PredictionLog` messages, at most 1,000) before it
marks a version available, so lazy initialisation and compiles happen before
traffic. The XLA variant compiles one program per padded (rows, source
length) shape; the records here send one request per padded shape up to a
configurable number of rows, plus one request per signature.

The padding rule lives here too, so that the warm-up and the signatures
cannot disagree: rows are padded to a power of two (at least
`XLA_MIN_ROWS` by default; an export's `xla_min_rows`, 1, 2, 4 or 8),
source lengths to a power of two (at least `XLA_MIN_WIDTH`), the widest
bucket being the input limit rounded up to a multiple of `XLA_MIN_WIDTH`.
Powers of two keep the programs few (4 source lengths at the default
128-token limit instead of 8 multiples of 16: half the compiles and half
the warm-up records); a padded column costs one more masked key to each
cross-attention, a small part of a decoding step.

The records are encoded here from the proto definitions
(`tensorflow_serving/apis/{prediction_log,predict,model}.proto`): writing
them needs TensorFlow's `TensorProto` only, not the `tensorflow-serving-api`
package (the tests parse them with that package's classes).
"""

import os

import numpy as np
import tensorflow as tf

from keras_transformer.data.special_tokens import EOS_ID

__all__ = [
    "DEFAULT_WARMUP_ROWS",
    "MAX_WARMUP_RECORDS",
    "WARMUP_PATH",
    "XLA_MIN_ROWS",
    "XLA_MIN_WIDTH",
    "padded_rows",
    "padded_shape",
    "padded_width",
    "pad_for_xla",
    "XLA_MIN_ROWS_CHOICES",
    "check_min_rows",
    "row_buckets",
    "warmup_requests",
    "width_buckets",
    "write_warmup_records",
]

WARMUP_PATH = os.path.join("assets.extra", "tf_serving_warmup_requests")
# TF Serving reads at most this many records (saved_model_warmup_util.cc).
MAX_WARMUP_RECORDS = 1000
# A request of 1 to 64 sentences: 4 row buckets (8, 16, 32, 64).
DEFAULT_WARMUP_ROWS = 64

XLA_MIN_ROWS = 8
# The smallest row buckets an export may choose instead (`xla_min_rows`).
XLA_MIN_ROWS_CHOICES = (1, 2, 4, 8)
XLA_MIN_WIDTH = 16
# Powers of two from 1 to 2**30 (int32 batch sizes).
_ROW_BUCKETS = tuple(2**k for k in range(31))

# A first token id that is not special (pad 0, unk 1, bos 2, eos 3).
_FIRST_TOKEN = EOS_ID + 1


def check_min_rows(min_rows):
    if isinstance(min_rows, bool) or min_rows not in XLA_MIN_ROWS_CHOICES:
        raise ValueError(f"`xla_min_rows` must be one of {XLA_MIN_ROWS_CHOICES}, got {min_rows!r}.")
    return min_rows


def padded_rows(rows, min_rows=XLA_MIN_ROWS):
    """The XLA variant's row count for a request of `rows` rows (next power of two, at least `min_rows`)."""
    if rows <= min_rows:
        return min_rows
    return 1 << (int(rows) - 1).bit_length()


def width_buckets(max_input_length):
    """Padded source lengths of sources of 1 to `max_input_length` tokens (EOS included): powers of two from
    `XLA_MIN_WIDTH`, then the limit rounded up to a multiple of `XLA_MIN_WIDTH` (never wider than that)."""
    last = -(-int(max_input_length) // XLA_MIN_WIDTH) * XLA_MIN_WIDTH
    return [bucket for bucket in _ROW_BUCKETS if XLA_MIN_WIDTH <= bucket < last] + [last]


def padded_width(width, max_input_length):
    """The XLA variant's source length for sources of `width` tokens (EOS included, at most `max_input_length`)."""
    return next((bucket for bucket in width_buckets(max_input_length) if bucket >= width), int(width))


def padded_shape(rows, width, max_input_length, min_rows=XLA_MIN_ROWS):
    return padded_rows(rows, min_rows), padded_width(width, max_input_length)


def _smallest_bucket(buckets, size):
    """Graph op: the smallest of `buckets` (ascending) that holds `size`, or `size` itself past the last."""
    buckets = tf.constant(buckets, tf.int32)
    return tf.reduce_min(tf.where(buckets >= size, buckets, tf.maximum(size, buckets[-1])))


def pad_for_xla(source_ids, max_input_length, min_rows=XLA_MIN_ROWS):
    """Graph ops: (rows, width) source ids padded to the XLA variant's shape.

    Extra rows are EOS-only sources (the caller drops their results); extra
    columns are pad (masked). Returns the padded ids.
    """
    rows, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    extra_rows = _smallest_bucket([bucket for bucket in _ROW_BUCKETS if bucket >= min_rows], rows) - rows
    extra_columns = _smallest_bucket(width_buckets(max_input_length), width) - width
    padded = tf.pad(source_ids, [[0, extra_rows], [0, extra_columns]], constant_values=0)
    is_extra_row = tf.range(rows + extra_rows) >= rows
    first_column = tf.range(width + extra_columns) == 0
    return tf.where(is_extra_row[:, tf.newaxis] & first_column[tf.newaxis, :], EOS_ID, padded)


def row_buckets(max_rows, min_rows=XLA_MIN_ROWS):
    """Padded row counts of requests of 1 to `max_rows` rows."""
    last = padded_rows(max_rows, min_rows)
    return [bucket for bucket in _ROW_BUCKETS if min_rows <= bucket <= last]


def check_warmup_rows(warmup_rows):
    """Validates `warmup_rows` (an int >= 1). Any count fits TF Serving's 1,000 records: at most 31 row
    buckets (int32 rows) times 28 source lengths (an int32 input limit), plus one record per signature."""
    if isinstance(warmup_rows, bool) or not isinstance(warmup_rows, int) or warmup_rows < 1:
        raise ValueError(f"`warmup_rows` must be an int >= 1, got {warmup_rows!r}.")
    return warmup_rows


# One request per signature: (signature, {input: value}).
_SIGNATURE_REQUESTS = (
    ("serving_default", {"text": [b"Warm-up request.", b"A second, longer warm-up request."]}),
    ("translate_ids", {"source_ids": [[_FIRST_TOKEN, _FIRST_TOKEN + 1, 0], [_FIRST_TOKEN + 2, 0, 0]]}),
    ("translate_ids_with_lengths", {"source_ids": [[_FIRST_TOKEN, _FIRST_TOKEN + 1, 0], [_FIRST_TOKEN + 2, 0, 0]],
                                    "source_lengths": [2, 1]}),
    ("translate_n_best", {"text": [b"Warm-up request."]}),
    # An empty target (EOS alone) is within any export's target limit; a
    # longer one could exceed a small export's and fail the warm-up.
    ("score", {"source": [b"Warm-up request."], "target": [b""]}),
)


def xla_bucket_request(rows, width, max_input_length, vocabulary_size):
    """`translate_ids` source ids whose padded shape is (padded_rows(rows, ...), width bucket `width`)."""
    tokens = min(width, max_input_length) - 1  # EOS makes the source `tokens + 1` long
    span = max(vocabulary_size - _FIRST_TOKEN, 1)
    ids = _FIRST_TOKEN + (np.arange(rows * tokens).reshape(rows, tokens) % span)
    return ids.astype(np.int32)


def warmup_requests(signatures, *, jit_compile, warmup_rows, max_input_length, vocabulary_size,
                    min_rows=XLA_MIN_ROWS):
    """[(signature, {input: value})]: each of `signatures` once, and with
    `jit_compile` one `translate_ids` request per padded (rows, width)
    bucket of up to `warmup_rows` rows."""
    requests = [(name, inputs) for name, inputs in _SIGNATURE_REQUESTS if name in signatures]
    if jit_compile:
        for bucket_rows in row_buckets(warmup_rows, min_rows):
            rows = min(bucket_rows, warmup_rows)
            for width in width_buckets(max_input_length):
                ids = xla_bucket_request(rows, width, max_input_length, vocabulary_size)
                requests.append(("translate_ids", {"source_ids": ids}))
    return requests


# Protocol buffer wire format (https://protobuf.dev/programming-guides/encoding/).
def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, payload):
    """A length-delimited field (wire type 2: strings, bytes, messages, map entries)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_prediction_log(model_name, signature_name, inputs):
    """A serialized PredictionLog{predict_log: PredictLog{request: PredictRequest}}."""
    # ModelSpec: name = 1, signature_name = 3.
    model_spec = _field(1, model_name.encode("utf-8")) + _field(3, signature_name.encode("utf-8"))
    # PredictRequest: model_spec = 1, map<string, TensorProto> inputs = 2 (entry: key = 1, value = 2).
    request = _field(1, model_spec)
    for key in sorted(inputs):
        value = inputs[key]
        dtype = tf.string if isinstance(value, list) and value and isinstance(value[0], bytes) else None
        tensor = tf.make_tensor_proto(value, dtype=dtype).SerializeToString()
        request += _field(2, _field(1, key.encode("utf-8")) + _field(2, tensor))
    # PredictLog: request = 1; PredictionLog: predict_log = 6.
    return _field(6, _field(1, request))


def write_warmup_records(export_dir, model_name, requests):
    """Writes `requests` as `export_dir/assets.extra/tf_serving_warmup_requests`; returns the path."""
    if len(requests) > MAX_WARMUP_RECORDS:
        raise ValueError(f"{len(requests)} warm-up records; TF Serving reads at most {MAX_WARMUP_RECORDS}.")
    path = os.path.join(export_dir, WARMUP_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for signature, inputs in requests:
            writer.write(encode_prediction_log(model_name, signature, inputs))
    return path
