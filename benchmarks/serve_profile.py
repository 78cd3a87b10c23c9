"""Where a decoding step's time goes in the served precisions: the matrix products against the rest.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `serve_profile.py`.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/serve_profile.py --preset base --vocabulary-size 32000
    KERAS_BACKEND=tensorflow python benchmarks/serve_profile.py --kernels 32x512x2048,32x512x32000 [--onednn-verbose]
"""

import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if "--onednn-verbose" in sys.argv:  # read by oneDNN when TensorFlow loads it
    os.environ["ONEDNN_VERBOSE"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import keras_transformer as kt  # noqa: E402
from keras_transformer.export.quantize import quantize_model  # noqa: E402
from keras_transformer.export.cpu_notes import tensorflow_uses_onednn  # noqa: E402
from benchmarks import _harness  # noqa: E402
from benchmarks._report_serve import serve_kernels_table  # noqa: E402

BOS, EOS = 2, 3


def parse_args(argv=None):
    parser = _harness.workload_options(_harness.parser(__doc__), preset="base", vocabulary_size=32000,
                                       batch_size=16, source_tokens=32, steps=50, beam_size=4)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--quantize", default="float32,int8,bfloat16",
                        help="comma-separated precisions: float32 and quantize_model's modes")
    parser.add_argument("--kernels", default=None,
                        help="comma-separated MxKxN (rows x inputs x outputs) product shapes: time one product "
                             "per kernel TensorFlow's plain graph could run instead (record: serve_kernels.jsonl)")
    parser.add_argument("--products", type=int, default=20, help="with --kernels: products per timed call")
    parser.add_argument("--onednn-verbose", action="store_true",
                        help="with --kernels: also oneDNN's own time for each product (ONEDNN_VERBOSE=1)")
    args = parser.parse_args(argv)
    if args.record is None:
        args.record = _harness.default_path("serve_kernels" if args.kernels else "serve_profile")
    return args


def best_seconds(function, calls):
    np.asarray(function())  # trace, compile, warm up
    return min(_harness.timings(lambda: np.asarray(function()), calls))


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


def kernel_products(rows, inputs, outputs):
    """{name: make} where make() (called in a tf.function) returns x -> x @ w in float32 for one kernel:
    TensorFlow's float32 and bfloat16 MatMul (oneDNN), Keras' int8 Dense (the int8 export's product: int8
    BatchMatMul), and oneDNN's u8 x s8 QuantizedMatMulWithBias, its int8 weights read from a variable (as
    a SavedModel holds them) or a graph constant, activations shifted to >= 0 and quantized per tensor."""
    import keras

    from keras_transformer.export.quantize import _config

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((inputs, outputs)) / np.sqrt(inputs)).astype("float32")
    dense = keras.layers.Dense(outputs, use_bias=False)
    dense.build((None, inputs))
    dense.set_weights([w])
    dense.quantize("int8", config=_config("int8"))
    w_max = float(np.abs(w).max())
    w_int8 = np.round(w / (w_max / 127)).astype("int8")
    variables = {"float32": tf.Variable(w), "bfloat16": tf.Variable(tf.cast(w, tf.bfloat16)),
                 "int8": tf.Variable(w_int8), "zero": tf.Variable(tf.zeros([outputs])),
                 "column sums": tf.Variable(w_int8.astype("float32").sum(0) * (w_max / 127))}

    def onednn(weights):
        def make():
            w_q = tf.bitcast(weights(), tf.qint8)

            def product(x):
                low = tf.reduce_min(x)
                q = tf.quantization.quantize(x - low, 0.0, tf.reduce_max(x - low), tf.quint8, mode="SCALED")
                out = tf.raw_ops.QuantizedMatMulWithBias(
                    a=q.output, b=w_q, bias=variables["zero"], min_a=q.output_min, max_a=q.output_max,
                    min_b=tf.constant(-w_max), max_b=tf.constant(w_max), Toutput=tf.qint32,
                    input_quant_mode="SCALED")
                scale = out.max_out / 2.0 ** 31
                return tf.cast(tf.bitcast(out.out, tf.int32), tf.float32) * scale + low * variables["column sums"]
            return product
        return make

    kernels = {"float32": lambda: lambda x: tf.matmul(x, variables["float32"]),
               "bfloat16": lambda: lambda x: tf.cast(tf.matmul(tf.cast(x, tf.bfloat16), variables["bfloat16"]),
                                                     tf.float32),
               "Keras int8 (int8 BatchMatMul)": lambda: dense}
    if tensorflow_uses_onednn():  # without oneDNN the quantized op has no kernel ("Missing 0-th output")
        kernels["oneDNN int8, weights a variable"] = onednn(lambda: variables["int8"].read_value())
        kernels["oneDNN int8, weights a constant"] = onednn(lambda: tf.constant(w_int8))
    return kernels, w


def onednn_exec_ms(call):
    """oneDNN's own execution time (ms) of its matrix primitives during `call()`, and how many reorders
    (weights copied into oneDNN's blocked layout) it ran, from ONEDNN_VERBOSE's lines (written to file
    descriptor 1 by the C library)."""
    import tempfile

    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile("w+") as log:
        os.dup2(log.fileno(), 1)
        try:
            call()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        lines = [line.rstrip().split(",") for line in log if line.startswith("onednn_verbose") and ",exec," in line]
    kinds = ("inner_product", "matmul", "gemm_api")
    return (sum(float(fields[-1]) for fields in lines if any(kind in fields for kind in kinds)),
            sum("reorder" in fields for fields in lines))


def kernels_main(args, argv):
    record = _harness.start("serve_kernels", argv, packages=("tensorflow", "keras"))
    record.update(products_per_call=args.products, calls=args.calls, us_per_product={}, relative_error={},
                  onednn_exec_us_per_product={}, onednn_reorders_per_product={})
    if not tensorflow_uses_onednn():
        print("# TensorFlow runs without oneDNN here (TF_ENABLE_ONEDNN_OPTS=1 turns it on): its int8 kernels are "
              "left out", flush=True)
    for shape in args.kernels.split(","):
        rows, inputs, outputs = (int(n) for n in shape.split("x"))
        products, w = kernel_products(rows, inputs, outputs)
        x = np.random.default_rng(1).standard_normal((rows, inputs)).astype("float32")
        exact = x @ w
        key = f"[{rows},{inputs}]x[{inputs},{outputs}]"
        timed, errors = {}, {}
        for name, make in products.items():
            one = tf.function(lambda x, make=make: make()(x), autograph=False)
            errors[name] = float(np.abs(np.asarray(one(x)) - exact).max() / np.abs(exact).max())

            def chain(x, make=make):  # distinct inputs: no product is merged with another
                product = make()
                return tf.add_n([tf.reduce_sum(product(x + 1e-6 * i)[:, :1]) for i in range(args.products)])

            timed[name] = tf.function(chain, autograph=False)
            timed[name](x)
        times = {name: [] for name in timed}
        for _ in range(args.calls):  # taking turns, so that load changes hit every kernel alike
            for name, run in timed.items():
                start = time.perf_counter()
                np.asarray(run(x))
                times[name].append((time.perf_counter() - start) / args.products)
        record["us_per_product"][key] = {name: 1e6 * min(t) for name, t in times.items()}
        record["relative_error"][key] = errors
        if args.onednn_verbose:
            for name, run in timed.items():
                milliseconds, reorders = onednn_exec_ms(lambda run=run: np.asarray(run(x)))
                record["onednn_exec_us_per_product"].setdefault(key, {})[name] = 1e3 * milliseconds / args.products
                record["onednn_reorders_per_product"].setdefault(key, {})[name] = reorders / args.products
        print(f"{key}: max relative error " + ", ".join(f"{name} {error:.4f}" for name, error in errors.items()),
              flush=True)
    _harness.finish(record)
    print("\n" + serve_kernels_table([record], {}) + "\n")
    _harness.save(args.record, record)


def main(argv=None):
    args = parse_args(argv)
    if args.kernels:
        return kernels_main(args, argv)
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
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
