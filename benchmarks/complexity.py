"""The paper's Table 1, measured: how the time of a self-attention, a recurrent
and a convolutional layer grows with the sequence length n and the width d.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `complexity.py`.

Usage:
    python benchmarks/complexity.py                # n 16..2048, d 64..1024 (long; a quiet machine)
    python benchmarks/complexity.py --quick        # tiny sizes, seconds: checks that it works
"""

import argparse
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from benchmarks import _harness  # noqa: E402
# The Table 1 arithmetic lives with the report's table (the tests use it from here too).
from benchmarks._report_tables import (  # noqa: E402, F401
    PAPER_EXPONENTS, complexity_table, crossover, fit_exponents, middle, per_sequence)

LAYERS = tuple(PAPER_EXPONENTS)
RECURRENT = ("LSTM", "GRU")

FULL = dict(lengths=[16, 32, 64, 128, 256, 512, 1024, 2048], widths=[64, 128, 256, 512, 1024],
            tokens=4096, heads=8, rounds=3, repeats=3)
QUICK = dict(lengths=[8, 16, 32], widths=[16, 32], tokens=128, heads=2, rounds=2, repeats=1)


def build_layer(name, d, heads):
    """The Keras layer `name` of width d, mapping (batch, n, d) to (batch, n, d)."""
    import keras
    from keras import ops

    from keras_transformer.layers import MultiHeadAttention, ScaledDotProductAttention

    class SelfAttention(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.attention = MultiHeadAttention(d, heads)

        def call(self, x):
            return self.attention(x, x)

    class AttentionCore(keras.layers.Layer):
        """softmax(QK^T / sqrt(d_k))V with Q = K = V = x split into heads: no projections."""

        def __init__(self):
            super().__init__()
            self.core = ScaledDotProductAttention()

        def call(self, x):
            batch, length = ops.shape(x)[0], ops.shape(x)[1]
            split = ops.transpose(ops.reshape(x, (batch, length, heads, d // heads)), (0, 2, 1, 3))
            return self.core(split, split, split)

    layers = {
        "self-attention": SelfAttention,
        "attention core": AttentionCore,
        "LSTM": lambda: keras.layers.LSTM(d, return_sequences=True),
        "GRU": lambda: keras.layers.GRU(d, return_sequences=True),
        "Conv1D k=3": lambda: keras.layers.Conv1D(d, 3, padding="same"),
    }
    if name not in layers:
        raise ValueError(f"unknown layer {name!r}; choose from {LAYERS}")
    return layers[name]()


def make_step(name, n, d, batch, heads, seed=0):
    """A compiled forward + backward pass (gradients for the input and the weights) of
    layer `name` on a fixed (batch, n, d) input; returns a function that runs it once."""
    import tensorflow as tf

    layer = build_layer(name, d, heads)
    x = tf.random.stateless_normal((batch, n, d), seed=(seed, n * 10007 + d))
    layer(x)  # creates the weights outside the compiled step
    weights = layer.trainable_variables

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.cast(layer(x), tf.float32))
        return tape.gradient(loss, [x] + list(weights))

    def run():
        gradients = step(x)
        # Read a result back: a call may return before the device has finished.
        float(tf.reduce_sum(gradients[0]).numpy())

    run()  # traces and compiles
    return run


def time_call(run, repeats):
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def measure(layers, lengths, widths, tokens, heads, rounds, repeats, log=print):
    """{layer: {(n, d): [seconds per batch, one per round]}}, the layers taking turns in each cell."""
    cells = [(n, d) for d in widths for n in lengths]
    steps = {}
    for n, d in cells:
        batch = max(1, tokens // n)
        for name in layers:
            steps[name, n, d] = make_step(name, n, d, batch, min(heads, d))
    seconds = {name: {cell: [] for cell in cells} for name in layers}
    for round_index in range(rounds):
        for cell_index, (n, d) in enumerate(cells):
            shift = (round_index + cell_index) % len(layers)
            for name in layers[shift:] + layers[:shift]:
                seconds[name][n, d].append(time_call(steps[name, n, d], repeats))
        log(f"round {round_index + 1}/{rounds} done")
    return seconds


def parse_sizes(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return sorted(set(values))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one repeat: checks that it runs")
    parser.add_argument("--lengths", type=parse_sizes, help="sequence lengths n (default 16,32,...,2048)")
    parser.add_argument("--widths", type=parse_sizes, help="widths d (default 64,128,...,1024)")
    parser.add_argument("--tokens", type=int, help="tokens per batch in every cell (default 4096)")
    parser.add_argument("--heads", type=int, help="attention heads (default 8, at most d)")
    parser.add_argument("--rounds", type=int, help="rounds over all cells (default 3)")
    parser.add_argument("--repeats", type=int, help="calls per layer and cell in a round; the best counts")
    parser.add_argument("--layers", default=",".join(LAYERS), help=f"comma-separated, from: {', '.join(LAYERS)}")
    parser.add_argument("--out-dir", default=str(HERE / "results"), help="where the report files go")
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # one compiled step per layer and cell is the plan, not retracing
    if keras.backend.backend() != "tensorflow":
        raise SystemExit(f"benchmarks/complexity.py times TensorFlow graphs; KERAS_BACKEND is "
                         f"{keras.backend.backend()!r}, set it to tensorflow.")
    settings = dict(QUICK if args.quick else FULL)
    for key in ("lengths", "widths", "tokens", "heads", "rounds", "repeats"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    layers = tuple(name.strip() for name in args.layers.split(",") if name.strip())
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        parser.error(f"--layers: unknown {unknown}; choose from {list(LAYERS)}")
    bad_widths = [d for d in settings["widths"] if d % min(settings["heads"], d)]
    if bad_widths:
        parser.error(f"--widths {bad_widths} are not multiples of --heads {settings['heads']}")
    if settings["tokens"] < max(settings["lengths"]):
        parser.error(f"--tokens {settings['tokens']} is less than the longest n {max(settings['lengths'])}")
    record = _harness.start("complexity", argv=argv, packages=("tensorflow", "keras"))
    settings.update(layers=list(layers), date=record["time"], commit=record["commit"], command=record["command"])

    started = time.perf_counter()
    seconds = measure(layers, settings["lengths"], settings["widths"], settings["tokens"], settings["heads"],
                      settings["rounds"], settings["repeats"])
    _harness.finish(record)
    times = per_sequence(seconds, settings["tokens"])
    lengths, widths = settings["lengths"], settings["widths"]
    fits = {name: {"all": list(fit_exponents(cells)[:2]),
                   "upper": list(fit_exponents(cells, middle(lengths), middle(widths))[:2])}
            for name, cells in times.items()}
    crossings = {name: {d: list(crossover(times["self-attention"], times[name], lengths, d)) for d in widths}
                 for name in RECURRENT if name in layers and "self-attention" in layers}

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = settings["date"].replace(" UTC", "").replace(" ", "-").replace(":", "")
    record.update(
        wall_seconds=round(time.perf_counter() - started, 1),
        settings={k: settings[k] for k in ("lengths", "widths", "tokens", "heads", "rounds", "repeats", "layers")},
        exponents=fits,
        crossovers={name: {str(d): v for d, v in by_d.items()} for name, by_d in crossings.items()},
        seconds_per_batch={name: {f"n={n},d={d}": values for (n, d), values in cells.items()}
                           for name, cells in seconds.items()},
    )
    text = complexity_table([record], {})
    print(text)
    (out / f"complexity-{stamp}.md").write_text(text + "\n", encoding="utf-8")
    _harness.append(out / "complexity.jsonl", record)
    print(f"\nwrote {out / f'complexity-{stamp}.md'}, {out / 'complexity.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
