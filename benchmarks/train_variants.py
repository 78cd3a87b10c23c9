"""Candidate speed-ups of ours' float32 training step, each measured against
the shipped layers in the same process.

    KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/train_variants.py --rounds 6
    KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/train_variants.py --rounds 6 --workload real

`train_throughput.py` runs each contender in its own process, minutes apart;
on this machine two processes of the same code differ by a few percent, more
than the changes tried here. So this script builds one model per variant in
one process (the same tiny configuration, seed and workloads as
`train_throughput.py`, through `model.compile` and Keras' own train
function), warms each up with two passes over the batches (every shape
traced), then takes turns: each round runs `--steps` steps of every variant,
the order reversed every other round. A variant's figure is the median over
rounds of its rate over the shipped model's rate in the same round. Each
variant's turn starts with one untimed step (the first step after a switch
of models runs with cold caches).

A variant swaps the `call` of some of the built model's layers (or how its
train function is traced), so the shipped code is the reference and nothing
here changes the package:

- fused-layer-norm: every LayerNormalization as one TensorFlow kernel each
  way, `FusedBatchNormV3` in training mode over a (1, rows, width, 1) NCHW
  view (the same mean, biased variance and epsilon), then gamma and beta,
  instead of Keras' dozen element-wise and reduction ops forward and more
  backward.
- flat-projections: every attention projection and feed-forward Dense on the
  (batch * length, width) rows as one 2-D product (Keras' Dense on a 3-D
  input goes through `tensordot`, whose reshapes keep Grappler from fusing
  the product with its bias and ReLU).
- fused-qkv: flat-projections, plus one product for the queries, keys and
  values of self-attention and one for the keys and values of
  cross-attention (the kernels concatenated each step), as OpenNMT-tf does.
- static-shapes: the train function traced once per batch shape
  (`reduce_retracing=False`), so every shape is known to Grappler and
  oneDNN (real text: 24 traces; fixed-shape batches: one either way).

Records go to benchmarks/results/train_variants.jsonl.
"""

import argparse
import os
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import _records, report  # noqa: E402
from benchmarks import _workloads as workloads  # noqa: E402
from benchmarks._contender_ours import Ours  # noqa: E402

VARIANTS = {
    "shipped": "the layers as shipped (reference)",
    "fused-layer-norm": "layer norm as FusedBatchNormV3 forward and FusedBatchNormGradV3 backward",
    "flat-projections": "attention and feed-forward products on 2-D rows (MatMul + BiasAdd (+ Relu) fusable)",
    "fused-qkv": "flat-projections plus one product for Q, K, V (self-attention) and for K, V (cross-attention)",
    "static-shapes": "the train function traced per batch shape (reduce_retracing=False)",
}


def fused_layer_norm_call(self, inputs, training=None):
    import tensorflow as tf

    x = tf.cast(inputs, tf.float32)
    rows = tf.reshape(x, [1, -1, x.shape[-1], 1])
    channels = tf.shape(rows)[1]
    empty = tf.zeros([0], tf.float32)
    normalized = tf.raw_ops.FusedBatchNormV3(
        x=rows, scale=tf.ones([channels]), offset=tf.zeros([channels]), mean=empty, variance=empty,
        epsilon=float(self.epsilon), exponential_avg_factor=1.0, data_format="NCHW", is_training=True,
    )[0]
    return tf.reshape(normalized, tf.shape(x)) * self.gamma + self.beta


def _rows(x):
    from keras import ops

    return ops.reshape(x, (-1, x.shape[-1]))


def _concatenated_dense(denses, rows):
    """One product for several Dense layers of the same input."""
    from keras import ops

    outputs = ops.matmul(rows, ops.concatenate([dense.kernel for dense in denses], axis=1))
    if denses[0].use_bias:
        outputs = outputs + ops.concatenate([dense.bias for dense in denses], axis=0)
    return outputs


def attention_call(fuse):
    """MultiHeadAttention.call on 2-D rows; with `fuse`, Q/K/V (or K/V) in one product."""
    from keras import ops

    def call(self, query, value, key=None, attention_mask=None, training=None, **kwargs):
        key = value if key is None else key
        batch, length = ops.shape(query)[0], ops.shape(query)[1]
        if fuse and query is value and key is value:
            q, k, v = ops.split(_concatenated_dense(
                [self.query_projection, self.key_projection, self.value_projection], _rows(query)), 3, axis=1)
        else:
            q = self.query_projection(_rows(query))
            if fuse and key is value:
                k, v = ops.split(_concatenated_dense([self.key_projection, self.value_projection], _rows(value)),
                                 2, axis=1)
            else:
                k, v = self.key_projection(_rows(key)), self.value_projection(_rows(value))
        q, k, v = (ops.transpose(ops.reshape(t, (batch, -1, self.num_heads, depth)), (0, 2, 1, 3))
                   for t, depth in ((q, self.key_depth), (k, self.key_depth), (v, self.depth)))
        if attention_mask is not None and len(attention_mask.shape) == 3:
            attention_mask = ops.expand_dims(attention_mask, axis=1)
        attended = self.attention(q, k, v, attention_mask=attention_mask, training=training)
        attended = ops.reshape(ops.transpose(attended, (0, 2, 1, 3)), (-1, self.d_model))
        return ops.reshape(self.output_projection(attended), (batch, length, self.d_model))

    return call


def flat_feed_forward_call(self, inputs, training=None):
    from keras import ops

    hidden = self.inner_dropout(self.inner(_rows(inputs)), training=training)
    return ops.reshape(self.outer(hidden), ops.shape(inputs))


def build(variant):
    import keras
    import tensorflow as tf

    from keras_transformer.layers.attention import MultiHeadAttention
    from keras_transformer.layers.feed_forward import PositionwiseFeedForward

    keras.utils.set_random_seed(0)
    # Ours' harness, compiled with our loss and optimizer (Keras' "auto" XLA choice); the train
    # function is made at the first step, after the swaps below.
    model = Ours(jit_compile="auto").build(workloads.SIZE)
    swaps = {
        "fused-layer-norm": {keras.layers.LayerNormalization: fused_layer_norm_call},
        "flat-projections": {MultiHeadAttention: attention_call(fuse=False),
                             PositionwiseFeedForward: flat_feed_forward_call},
        "fused-qkv": {MultiHeadAttention: attention_call(fuse=True), PositionwiseFeedForward: flat_feed_forward_call},
    }.get(variant, {})
    swapped = 0
    for layer in model._flatten_layers(include_self=False, recursive=True):
        for kind, call in swaps.items():
            if isinstance(layer, kind):
                layer.call = types.MethodType(call, layer)
                swapped += 1
    if swaps and not swapped:
        raise SystemExit(f"variant {variant}: no layer to swap (did the model's layers change?)")
    if variant == "static-shapes":
        traced = tf.function

        def per_shape(*args, **kwargs):
            kwargs["reduce_retracing"] = False
            return traced(*args, **kwargs)

        tf.function = per_shape  # Keras' make_train_function looks it up at call time
        try:
            model.make_train_function()
        finally:
            tf.function = traced
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("synthetic", "real"), default="synthetic",
                        help="train_throughput.py's workloads: fixed-shape random batches, or real text")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "throughput"),
                        help="where the real workload's batches are cached (shared with train_throughput.py)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS)[1:],
                        help=f"variants besides the shipped layers (default: all of {', '.join(list(VARIANTS)[1:])})")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    parser.add_argument("--record", default=_records.default_path("train_variants"),
                        help="JSON-lines file the record is appended to (default %(default)s; '' for none)")
    args = parser.parse_args()
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; choose from {', '.join(list(VARIANTS)[1:])}")
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    if keras.backend.backend() != "tensorflow":
        raise SystemExit("train_variants.py measures the TensorFlow training step: set KERAS_BACKEND=tensorflow")
    batches = workloads.load_batches(args.workload, args.data_dir, args.work_dir)
    counts = workloads.target_tokens(batches)
    dataset = workloads.cycled_dataset(batches)

    names = ["shipped"] + [v for v in args.variants if v != "shipped"]
    record = _records.start("train_variants")
    models, iterators, position = {}, {}, {}
    for name in names:
        print(f"building and warming up {name} ...", file=sys.stderr, flush=True)
        models[name] = build(name)
        iterators[name] = workloads.warmed_up(models[name], dataset, 2 * len(batches))
        position[name] = 2 * len(batches)
    rounds = []
    for index in range(args.rounds):
        current = {}
        for name in (names if index % 2 == 0 else names[::-1]):
            model = models[name]
            model.train_function(iterators[name])  # untimed: the first step after a switch finds cold caches
            position[name] += 1
            start = time.perf_counter()
            for _ in range(args.steps):
                logs = model.train_function(iterators[name])
            float(logs["loss"])  # the last step has finished
            seconds = time.perf_counter() - start
            tokens = sum(counts[(position[name] + step) % len(batches)] for step in range(args.steps))
            position[name] += args.steps
            current[name] = {"seconds": seconds, "target_tokens": tokens, "tokens_per_s": tokens / seconds}
        rounds.append(current)
        print(f"round {index + 1}/{args.rounds}: " + ", ".join(
            f"{n} {current[n]['tokens_per_s']:.0f}" for n in names), file=sys.stderr, flush=True)

    record.update({
        "workload": {"kind": args.workload, "batches": len(batches), "steps": args.steps, "rounds": args.rounds,
                     "warmup_passes": 2, "config": workloads.SIZE,
                     "target_tokens_per_batch": sum(counts) / len(batches)},
        "reference": "shipped", "rounds": rounds,
        "results": [{"name": name, "label": VARIANTS[name]} for name in names],
    })
    _records.finish(record)
    # The table the documentation shows, medians and same-round ratios from the rounds above.
    print("\n" + report.variants_table([record], {}))
    _records.save(args.record, record)


if __name__ == "__main__":
    main()
