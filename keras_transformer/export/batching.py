"""TF Serving's server-side batching parameters that fit an export.

`tensorflow_model_server --enable_batching --batching_parameters_file=FILE`
reads FILE as a `tensorflow.serving.BatchingParameters` text proto
(`tensorflow_serving/servables/tensorflow/session_bundle_config.proto`).
Every export writes one that fits it to `assets.extra/batching_parameters.txt`:

- the XLA variant compiles one program per padded row count (its row
  buckets, `keras_transformer.export.warmup.row_buckets`), so the server's
  `allowed_batch_sizes` are those buckets and `max_batch_size` the largest
  one the warm-up records compile: a merged batch never needs a program
  the warm-up did not compile;
- the plain variant runs any row count: no allowed sizes (a batch padded
  up to one would search the padding rows too), and `max_batch_size` the
  warm-up's `warmup_rows`.

`pad_variable_length_inputs` is on so that `translate_ids` requests of
different widths can share a batch: the server widens each request with its
own first id, not 0 (tensorflow/serving issue 1279), which `translate_ids`
ignores after a row's EOS or pad and `translate_ids_with_lengths` after its
length. The string signatures have no second dimension to pad.
"""

import os

from keras_transformer.export import warmup as warmup_lib

__all__ = ["BATCHING_PATH", "batching_parameters", "batching_parameters_text"]

BATCHING_PATH = os.path.join("assets.extra", "batching_parameters.txt")

# How long the server waits to fill a batch, and how many batches may queue:
# a few milliseconds against searches of tens of milliseconds or more.
BATCH_TIMEOUT_MICROS = 5000
MAX_ENQUEUED_BATCHES = 100
# One batch at a time: each search already spreads over the intra-op threads.
NUM_BATCH_THREADS = 1


def batching_parameters(*, jit_compile, warmup_rows, xla_min_rows=warmup_lib.XLA_MIN_ROWS):
    """{field: value} of the BatchingParameters that fit an export."""
    if jit_compile:
        allowed = warmup_lib.row_buckets(warmup_rows, xla_min_rows)
        maximum = allowed[-1]
    else:
        allowed, maximum = [], int(warmup_rows)
    return {
        "max_batch_size": maximum,
        "batch_timeout_micros": BATCH_TIMEOUT_MICROS,
        "max_enqueued_batches": MAX_ENQUEUED_BATCHES,
        "num_batch_threads": NUM_BATCH_THREADS,
        "allowed_batch_sizes": allowed,
        "pad_variable_length_inputs": True,
    }


def batching_parameters_text(parameters):
    """`parameters` in the protobuf text format (the wrapper fields as `{ value: N }`)."""
    lines = [
        "# tensorflow_model_server --enable_batching --batching_parameters_file=THIS_FILE",
        "# (tensorflow.serving.BatchingParameters, written by keras-transformer's export to fit it)",
    ]
    for name in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads"):
        lines.append(f"{name} {{ value: {int(parameters[name])} }}")
    lines += [f"allowed_batch_sizes: {int(size)}" for size in parameters["allowed_batch_sizes"]]
    lines.append(f"pad_variable_length_inputs: {'true' if parameters['pad_variable_length_inputs'] else 'false'}")
    return "\n".join(lines) + "\n"


def write_batching_parameters(export_dir, parameters):
    """Writes `parameters` to `export_dir/assets.extra/batching_parameters.txt`; returns the path."""
    path = os.path.join(export_dir, BATCHING_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(batching_parameters_text(parameters))
    return path
