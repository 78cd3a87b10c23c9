"""Where a decoding step's time goes in the served precisions: the matrix products against the rest.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `serve_profile.py`.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/serve_profile.py --preset base --vocabulary-size 32000
"""

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import keras_transformer as kt  # noqa: E402
from keras_transformer.export.quantize import quantize_model  # noqa: E402
from benchmarks import _harness  # noqa: E402

BOS, EOS = 2, 3


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=("tiny", "base", "big"), default="base")
    parser.add_argument("--vocabulary-size", type=int, default=32000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--source-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--quantize", default="float32,int8,bfloat16",
                        help="comma-separated precisions: float32 and quantize_model's modes")
    parser.add_argument("--record", default=_harness.default_path("serve_profile"))
    return parser.parse_args(argv)


def best_seconds(function, calls):
    np.asarray(function())  # trace, compile, warm up
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        np.asarray(function())
        times.append(time.perf_counter() - start)
    return min(times)


def steps_loop(model, source, args, jit_compile):
    rows = args.batch_size * args.beam_size

    @tf.function(jit_compile=jit_compile, autograph=False)
    def run(source):
        decoder = model.incremental_decoder(source, beam_size=args.beam_size, buffer_length=args.steps,
                                            jit_compile=jit_compile)

        def body(step, tokens, state):
            logits, state = decoder.step(state, tokens, step)
            return step + 1, tf.cast(tf.argmax(logits, -1), tf.int32), state

        start = (0, tf.fill([rows], BOS), decoder.initial_state)
        return tf.while_loop(lambda step, *_: step < args.steps, body, start)[1]

    return lambda: run(source)


def products_loop(model, source, args, jit_compile):
    rows = args.batch_size * args.beam_size
    dtype = model.compute_dtype

    @tf.function(jit_compile=jit_compile, autograph=False)
    def run(source):
        decoder = model.incremental_decoder(source, beam_size=args.beam_size, buffer_length=args.steps,
                                            jit_compile=jit_compile)
        hidden = tf.random.stateless_normal([rows, 1, model.d_model], (1, 2), dtype=dtype)
        inner = tf.random.stateless_normal([rows, 1, model.d_ff], (3, 4), dtype=dtype)

        def body(step, total):
            # Inputs that change with the step, so that no product is hoisted out of the loop.
            shift = tf.cast(total, dtype) * tf.cast(1e-6, dtype)
            x, h = hidden + shift, inner + shift
            outputs = []
            for index, layer in enumerate(model.decoder.stacked_layers):
                self_attention, cross = layer.self_attention, layer.cross_attention
                outputs += list(decoder._project_query_key_value(index, self_attention, x))
                outputs += [self_attention.output_projection(x), cross.query_projection(x),
                            cross.output_projection(x), layer.feed_forward.inner(x), layer.feed_forward.outer(h)]
            outputs.append(model.target_embedding.logits(x))
            # One stacked sum, not tf.add_n or chained adds: grappler rewrites those inside a while
            # loop into temporary variables that fail on the next iteration ("AlreadyExistsError ... TmpVar").
            touched = tf.stack([tf.cast(tf.reduce_sum(out[:, :, :1]), tf.float32) for out in outputs])
            return step + 1, total + tf.reduce_sum(touched)

        return tf.while_loop(lambda step, _: step < args.steps, body, (0, tf.constant(0.0)))[1]

    return lambda: run(source)


def main(argv=None):
    args = parse_args(argv)
    import keras

    keras.utils.set_random_seed(0)
    float_model = kt.Transformer.from_preset(args.preset, vocabulary_size=args.vocabulary_size)
    rng = np.random.default_rng(0)
    source = rng.integers(4, args.vocabulary_size, size=(args.batch_size, args.source_tokens)).astype("int32")
    source[:, -1] = EOS
    source = tf.constant(source)
    record = _harness.start("serve_profile", argv, packages=("tensorflow", "keras"))
    record["workload"] = {"preset": args.preset, "vocabulary": args.vocabulary_size, "batch": args.batch_size,
                          "source_tokens": args.source_tokens, "steps": args.steps, "beam_size": args.beam_size,
                          "rows": args.batch_size * args.beam_size}
    record["ms_per_step"] = {}
    for precision in args.quantize.split(","):
        model = float_model if precision == "float32" else quantize_model(float_model, precision)
        for variant, jit_compile in (("XLA", True), ("plain", False)):
            step = best_seconds(steps_loop(model, source, args, jit_compile), args.calls) / args.steps
            products = best_seconds(products_loop(model, source, args, jit_compile), args.calls) / args.steps
            key = f"{precision}, {variant}"
            record["ms_per_step"][key] = {"step": 1000 * step, "products": 1000 * products}
            print(f"{key}: step {1000 * step:.1f} ms, products alone {1000 * products:.1f} ms "
                  f"({100 * products / step:.0f}%), rest {1000 * (step - products):.1f} ms", flush=True)
    _harness.finish(record)
    load = record["load_average"]
    print(f"# {record['machine']['cpu']}, {os.cpu_count()} CPUs, load average {load['before'][0]:.1f} before, "
          f"{load['after'][0]:.1f} after; TensorFlow {tf.__version__}; commit {record['commit']}")
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
