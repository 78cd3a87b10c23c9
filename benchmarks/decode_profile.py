"""Where an XLA-compiled search spends its time, on decode.py's workload.

Three measurements, each an XLA-compiled `tf.while_loop` timed as the best
of a few calls (TensorFlow backend, CPU):

1. the model's steps alone (`Transformer.incremental_decoder`, argmax of the
   logits, no search) against the whole search (`beam_search` /
   `greedy_search`): the search's own share;
2. the time per step of those steps alone for key/value caches of 25, 50,
   200 and 400 positions: what grows with the cache;
3. the matrix products of a step, alone, at the step's shapes, with XLA, as a
   plain graph and with numpy: how close to this CPU's peak they run.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/decode_profile.py
"""

import os
import platform
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import keras_transformer as kt  # noqa: E402
from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402

VOCABULARY, BATCH, SOURCE, STEPS, BEAM = 8000, 32, 32, 50, 4


def best_seconds(function, calls=3):
    np.asarray(function())  # compile and warm up
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        np.asarray(function())
        times.append(time.perf_counter() - start)
    return min(times)


def steps_only(model, source, beam, cache_positions, steps):
    @tf.function(jit_compile=True, autograph=False)
    def run(source):
        decoder = model.incremental_decoder(source, beam_size=beam, buffer_length=cache_positions, jit_compile=True)

        def body(step, tokens, state):
            logits, state = decoder.step(state, tokens, step)
            return step + 1, tf.cast(tf.argmax(logits, -1), tf.int32), state

        start = (0, tf.fill([BATCH * beam], 2), decoder.initial_state)
        return tf.while_loop(lambda step, *_: step < steps, body, start)[1]

    return lambda: run(source)


def matmul_rates(m, k, n, repeats=50):
    x, w = tf.random.normal((m, k)), tf.random.normal((k, n))

    def loop():
        def body(i, total):
            return i + 1, total + tf.matmul(x + tf.cast(i, tf.float32) * 1e-9, w)[:, :1]

        return tf.while_loop(lambda i, _: i < repeats, body, (0, tf.zeros((m, 1))))[1]

    rates = {}
    for name, function in (("XLA", tf.function(loop, jit_compile=True)), ("graph", tf.function(loop))):
        rates[name] = best_seconds(function, 5) / repeats
    xn, wn = x.numpy(), w.numpy()
    rates["numpy"] = best_seconds(lambda: [xn @ wn for _ in range(repeats)][-1], 5) / repeats
    flops = 2 * m * k * n
    return {name: (seconds * 1000, flops / seconds / 1e9) for name, seconds in rates.items()}


def main():
    keras.utils.set_random_seed(0)
    model = kt.Transformer.from_preset("tiny", vocabulary_size=VOCABULARY)
    rng = np.random.default_rng(0)
    source = rng.integers(4, VOCABULARY, size=(BATCH, SOURCE)).astype("int32")
    source[:, -1] = 3
    source = tf.constant(source)
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"TensorFlow {tf.__version__}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# tiny preset, vocabulary {VOCABULARY}, {BATCH} sources x {SOURCE} tokens, {STEPS} steps, XLA")

    print("\n1. the search's share (ms per call)")
    fixed = dict(max_output_length=STEPS, min_length=STEPS, jit_compile=True)
    for label, beam, search in (
        (f"beam {BEAM}", BEAM, lambda: beam_search(model, source, beam_size=BEAM, **fixed)["ids"]),
        ("greedy", 1, lambda: greedy_search(model, source, **fixed)["ids"]),
    ):
        alone = best_seconds(steps_only(model, source, beam, STEPS, STEPS))
        whole = best_seconds(search)
        print(f"   {label}: model steps alone {1000 * alone:.0f}, whole search {1000 * whole:.0f} "
              f"(steps {100 * alone / whole:.0f}% of it)")

    print("\n2. ms per step, model steps alone, by cache size (20 steps)")
    for beam in (BEAM, 1):
        row = []
        for positions in (25, 50, 200, 400):
            seconds = best_seconds(steps_only(model, source, beam, positions, 20))
            row.append(f"{positions}: {1000 * seconds / 20:.2f}")
        print(f"   beam {beam}: " + ", ".join(row))

    print("\n3. one matrix product of a step (ms, GFLOP/s)")
    rows = BATCH * BEAM
    for m, k, n, what in (
        (rows, 256, VOCABULARY, "output projection, beam"), (BATCH, 256, VOCABULARY, "output projection, greedy"),
        (rows, 256, 768, "fused query/key/value, beam"), (rows, 256, 1024, "feed-forward in, beam"),
        (rows, 1024, 256, "feed-forward out, beam"), (BATCH, 256, 768, "fused query/key/value, greedy"),
    ):
        rates = matmul_rates(m, k, n)
        print(f"   {m}x{k}x{n} ({what}): " + ", ".join(
            f"{name} {ms:.3f} ms {gflops:.0f}" for name, (ms, gflops) in rates.items()))


if __name__ == "__main__":
    main()
