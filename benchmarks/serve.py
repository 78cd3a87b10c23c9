"""Serving latency and throughput: the exported SavedModel against in-process Keras.

One model ("tiny" preset: d_model 256, 3+3 layers, 4 heads, d_ff 1024; random
weights) and one tokenizer (SentencePiece, trained on the English-German
corpus in /work/shared/data when present, else on the synthetic quickstart
corpus) are exported with `keras_transformer.export.export_saved_model`, the
export is loaded back with `tf.saved_model.load`, and every contender
translates the same sentences with the same search settings:

- SavedModel `serving_default`: strings in, strings out (what TF Serving runs);
- SavedModel `translate_ids`: ids in, ids out;
- in-process Keras: `keras_transformer.decoding.translate` (strings), and
  `beam_search` on ids, each compiled as a `tf.function` graph without XLA
  (the same search the export contains), plus `beam_search` with XLA
  (`jit_compile=True`), which TF Serving does not run by default.

An untrained model rarely emits EOS, so every sentence runs to its length
limit (source tokens + `--max-extra-length`): all contenders do the same work.
Latency: one sentence, `--runs` calls after a warm-up call, p50 and p95.
Throughput: a batch of `--batch-size` sentences, best of `--rounds` calls.
Calls are interleaved (each round calls every contender once), so load from
other processes on a shared machine hits every contender alike.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/serve.py [--runs 10 --rounds 3]
"""

import argparse
import glob
import os
import platform
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import keras_transformer as kt  # noqa: E402
from keras_transformer.data import SubwordTokenizer  # noqa: E402
from keras_transformer.decoding import beam_search  # noqa: E402

SHARED_DATA = "/work/shared/data"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--corpus-pairs", type=int, default=20000, help="pairs read to train the tokenizer")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--max-extra-length", type=int, default=10)
    parser.add_argument("--max-input-length", type=int, default=64)
    parser.add_argument("--max-sentence-tokens", type=int, default=24, help="longest benchmark sentence")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--runs", type=int, default=10, help="timed one-sentence calls per contender")
    parser.add_argument("--rounds", type=int, default=3, help="timed batch calls per contender")
    parser.add_argument("--skip-xla", action="store_true")
    return parser.parse_args()


def corpus(args):
    """(description, pairs) from the shared English-German data, else the synthetic corpus."""
    from keras_transformer.data import read_jsonl

    candidates = sorted(glob.glob(os.path.join(SHARED_DATA, "*en_de*.jsonl.gz")))
    if candidates:
        pairs = []
        for pair in read_jsonl(candidates[0], source_key="en", target_key="de"):
            pairs.append(pair)
            if len(pairs) >= args.corpus_pairs:
                break
        return f"{candidates[0]} (first {len(pairs)} pairs)", pairs
    from keras_transformer.datasets.synthetic_en_de import generate_pairs

    pairs = generate_pairs(args.corpus_pairs, seed=0)
    return f"synthetic_en_de.generate_pairs({len(pairs)})", pairs


def pick_sentences(pairs, count, tokenizer, max_tokens):
    """`count` distinct source sentences of 8 to max_tokens - 1 tokens, spread over the corpus."""
    chosen = []
    for source, _ in pairs[:: max(1, len(pairs) // (20 * count))]:
        tokens = tokenizer.tokenize(source).shape[0]
        if 8 <= tokens < max_tokens and source not in chosen:
            chosen.append(source)
        if len(chosen) == count:
            return chosen
    raise SystemExit(f"found only {len(chosen)} suitable sentences")


def source_ids(tokenizer, texts, max_input_length):
    rows = [list(r)[: max_input_length - 1] + [3] for r in tokenizer.tokenize(texts).to_list()]
    width = max(len(r) for r in rows)
    return np.array([r + [0] * (width - len(r)) for r in rows], dtype="int32")


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q))


def measure(contenders, inputs, args):
    """Latency and throughput per contender, interleaved.

    The machine may be shared: each round calls every contender once, so a
    burst of load from elsewhere hits all of them alike.
    """
    for name, kind, function in contenders:  # warm-up: traces, instantiates, allocates
        one, batch = inputs[kind]
        function(one)
        function(batch)
    latencies = {name: [] for name, _, _ in contenders}
    for _ in range(args.runs):
        for name, kind, function in contenders:
            start = time.perf_counter()
            function(inputs[kind][0])
            latencies[name].append(time.perf_counter() - start)
    best = {name: float("inf") for name, _, _ in contenders}
    best_cpu = {name: float("inf") for name, _, _ in contenders}
    for _ in range(args.rounds):
        for name, kind, function in contenders:
            start, start_cpu = time.perf_counter(), time.process_time()
            function(inputs[kind][1])
            best[name] = min(best[name], time.perf_counter() - start)
            best_cpu[name] = min(best_cpu[name], time.process_time() - start_cpu)
    return [
        (name, kind, {
            "p50": percentile(latencies[name], 50),
            "p95": percentile(latencies[name], 95),
            "throughput": len(inputs[kind][1]) / best[name],
            "batch_cpu": best_cpu[name],
        })
        for name, kind, _ in contenders
    ]


def main():
    args = parse_args()
    if keras.backend.backend() != "tensorflow":
        raise SystemExit("run with KERAS_BACKEND=tensorflow (the export is a TensorFlow SavedModel)")
    import tensorflow as tf

    from keras_transformer.export import export_saved_model

    description, pairs = corpus(args)
    start = time.perf_counter()
    tokenizer = SubwordTokenizer.train(
        pairs, args.vocabulary_size, hard_vocab_limit=False, seed=0, input_sentence_size=200_000
    )
    tokenizer_seconds = time.perf_counter() - start
    keras.utils.set_random_seed(0)
    model = kt.Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size)

    search = dict(beam_size=args.beam_size, alpha=args.alpha, max_extra_length=args.max_extra_length)
    with tempfile.TemporaryDirectory() as base:
        start = time.perf_counter()
        export_dir = export_saved_model(
            model, tokenizer, base, max_input_length=args.max_input_length, **search
        )
        export_seconds = time.perf_counter() - start
        loaded = tf.saved_model.load(export_dir)
        serve_text = loaded.signatures["serving_default"]
        serve_ids = loaded.signatures["translate_ids"]

        texts = pick_sentences(pairs, args.batch_size, tokenizer, min(args.max_sentence_tokens, args.max_input_length))
        one_text, batch_text = tf.constant(texts[:1]), tf.constant(texts)
        one_ids = tf.constant(source_ids(tokenizer, texts[:1], args.max_input_length))
        batch_ids = tf.constant(source_ids(tokenizer, texts, args.max_input_length))

        contenders = [
            ("SavedModel serving_default (text)", "text",
             lambda x: serve_text(text=x)["translations"].numpy()),
            ("SavedModel translate_ids (ids)", "ids",
             lambda x: serve_ids(source_ids=x)["ids"].numpy()),
        ]
        try:
            from keras_transformer.decoding import translate
        except ImportError:
            translate = None
        if translate is not None:
            contenders.append(
                ("Keras in-process translate (text)", "text",
                 lambda x: translate(model, tokenizer, [t.decode("utf-8") for t in x.numpy()],
                                     batch_size=args.batch_size, **search))
            )
        else:
            # Until decoding.translate exists: the same steps composed by hand.
            contenders.append(
                ("Keras in-process tokenize + beam_search + detokenize (text)", "text",
                 lambda x: tokenizer.detokenize(beam_search(
                     model, source_ids(tokenizer, x, args.max_input_length), **search)["ids"]).numpy())
            )
        contenders.append(
            ("Keras in-process beam_search (ids, graph)", "ids",
             lambda x: keras.ops.convert_to_numpy(beam_search(model, x, **search)["ids"]))
        )
        if not args.skip_xla:
            contenders.append(
                ("Keras in-process beam_search (ids, XLA)", "ids",
                 lambda x: keras.ops.convert_to_numpy(beam_search(model, x, jit_compile=True, **search)["ids"]))
            )

        inputs = {"text": (one_text, batch_text), "ids": (one_ids, batch_ids)}
        results = measure(contenders, inputs, args)

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{load[0]:.1f}, TensorFlow {tf.__version__}, Keras {keras.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# tokenizer: {tokenizer.vocabulary_size} pieces trained on {description} in "
          f"{tokenizer_seconds:.1f} s; export (trace, save, op check) {export_seconds:.1f} s")
    print(f"# tiny preset, random weights; beam {args.beam_size}, alpha {args.alpha}, "
          f"max_extra_length {args.max_extra_length}, max_input_length {args.max_input_length}; "
          f"source lengths {int(np.count_nonzero(one_ids))} (one), "
          f"{np.count_nonzero(batch_ids.numpy(), axis=1).mean():.1f} mean (batch of {len(texts)})")
    print(f"# latency: {args.runs} calls on one sentence; throughput: best of {args.rounds} "
          f"calls on {len(texts)} sentences; batch CPU s: least process CPU time (all threads) "
          f"of those calls, steadier than wall time on a shared machine")
    reference = {kind: next(r for n, k, r in results if k == kind and n.startswith("Keras")) for kind in ("text", "ids")}
    header = ("contender", "p50 ms", "p95 ms", "sent/s", "batch CPU s", "p50 vs Keras", "sent/s vs Keras")
    rows = []
    for name, kind, result in results:
        base = reference[kind]
        rows.append((
            name,
            f"{1000 * result['p50']:.1f}",
            f"{1000 * result['p95']:.1f}",
            f"{result['throughput']:.1f}",
            f"{result['batch_cpu']:.1f}",
            f"{result['p50'] / base['p50']:.2f}x",
            f"{result['throughput'] / base['throughput']:.2f}x",
        ))
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    print("# ratios compare with the first in-process Keras contender of the same input kind "
          "(text with translate, ids with beam_search); < 1x latency and > 1x sent/s favour the row.")


if __name__ == "__main__":
    main()
