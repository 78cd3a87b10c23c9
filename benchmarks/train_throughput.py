"""Training throughput: keras_transformer against the alternatives, in one run.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `train_throughput.py`.

    .venv/bin/python benchmarks/train_throughput.py --rounds 3 --only ours-tf keras-hub opennmt-tf
    .venv/bin/python benchmarks/train_throughput.py --workload real  # real text
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import _harness  # noqa: E402
from benchmarks._contender_opennmt import INSTALL, OpenNMT  # noqa: E402
from benchmarks._harness import positive, timings  # noqa: E402
from benchmarks._workloads import (  # noqa: E402
    BOS, CORPORA, EOS, MAX_LENGTH, PAD, REAL_TOKENS_PER_BATCH, SIZE, make_batches, peak_memory_mb, read_pairs,
    target_tokens, training_flops, training_products
)
from benchmarks._report_tables import throughput_table  # noqa: E402

REAL_NUM_BATCHES = 24  # the real workload's distinct batches, cycled
# Contender name: the harness module whose THROUGHPUT table holds it (_workloads.Contender's shape),
# imported when needed: a worker process imports only its own (ours-jax must not load TensorFlow).
MODULES = {
    "ours-tf": "ours", "ours-tf-xla": "ours", "ours-jax": "ours", "keras-hub": "keras-hub",
    "keras-hub-tied": "keras-hub", "ours-tf-bf16": "ours", "keras-hub-bf16": "keras-hub",
    "keras-hub-tied-bf16": "keras-hub", "torch.nn.Transformer": "torch",
}


def contender(name):
    if MODULES[name] == "ours":
        from benchmarks._workloads import THROUGHPUT
    elif MODULES[name] == "keras-hub":
        from benchmarks._contender_keras_hub import THROUGHPUT
    else:
        from benchmarks._contender_torch import THROUGHPUT
    return THROUGHPUT[name]


def load_batches(workload, data_dir, work_dir, bucket_width=1):
    """The batches of `workload`: "synthetic", or "real" (docs/benchmarks.md), cached in `work_dir`."""
    if workload != "real":
        return make_batches()
    import numpy as np

    work = Path(work_dir)
    cache = work / f"batches_width{bucket_width}.npz"
    if cache.exists():
        arrays = np.load(cache)
        return [tuple(arrays[f"{name}{i}"] for name in ("source", "target", "labels"))
                for i in range(len(arrays.files) // 3)]
    paths = [Path(data_dir) / name for name in CORPORA]
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise SystemExit(f"--workload real: {', '.join(missing)} not found (set --data-dir)")
    from keras_transformer.data import SubwordTokenizer, default_bucket_boundaries, make_dataset

    pairs = [pair for path in paths for pair in read_pairs(path)]
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = SubwordTokenizer.train(pairs, vocabulary_size=SIZE["vocab"], model_type="unigram", seed=0)
    if tokenizer.vocabulary_size != SIZE["vocab"] or (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) != (
            PAD, BOS, EOS):
        raise SystemExit("--workload real: the tokenizer's vocabulary or special ids differ from the benchmark's")
    dataset = make_dataset(
        pairs, tokenizer, tokens_per_batch=REAL_TOKENS_PER_BATCH, max_length=MAX_LENGTH,
        bucket_boundaries=default_bucket_boundaries(
            MAX_LENGTH, min_boundary=bucket_width, growth=1, multiple=bucket_width),
        training=True, seed=0, cache=False,
    )
    batches = []
    for inputs, labels in dataset.take(REAL_NUM_BATCHES):
        batches.append((inputs["source"].numpy(), inputs["target"].numpy(), labels.numpy()))
    np.savez(cache, **{f"{name}{i}": array for i, batch in enumerate(batches)
                       for name, array in zip(("source", "target", "labels"), batch)})
    return batches


def matmul_floor_seconds(batches, repeats=3):
    """Seconds for the matrix products of one pass over `batches` alone: per batch shape, every product of its
    step (random float32 operands, no dependencies, so the executor may overlap them) in one tf.function, the
    best of `repeats` calls. A step that does anything else takes longer: the bound a rate is measured against."""
    import tensorflow as tf

    seconds_by_shape = {}
    total = 0.0
    for source, _, labels in batches:
        shape = (labels.shape[0], source.shape[1], labels.shape[1])
        if shape not in seconds_by_shape:
            operands = []
            for b, m, k, n in training_products(SIZE, *shape):
                lead = () if b == 1 else (b,)
                operands.append((tf.random.normal(lead + (m, k)), tf.random.normal(lead + (k, n))))

            @tf.function
            def products():
                # A sum of each product keeps it from being pruned or sliced.
                return tf.add_n([tf.reduce_sum(tf.matmul(a, b)) for a, b in operands])

            products().numpy()
            seconds_by_shape[shape] = min(timings(lambda: products().numpy(), repeats))
            del operands, products
        total += seconds_by_shape[shape]
    return total


def worker(args):
    """Runs one contender in this process and prints one JSON line."""
    batches = load_batches(args.workload, args.data_dir, args.work_dir, args.bucket_width)
    harness = contender(args.worker)
    timed = harness.train_steps(harness.build(SIZE), batches, args.steps, args.warmup)
    seconds = timed["seconds"]
    print("RESULT " + json.dumps({
        "name": args.worker, "backend": harness.backend, "tokens_per_s": timed["target_tokens"] / seconds,
        "steps_per_s": args.steps / seconds, "peak_mb": peak_memory_mb(),
        "seconds": seconds, "target_tokens": timed["target_tokens"], "steps": args.steps,
    }))


def main():
    parser = _harness.parser(__doc__, "train_throughput")
    parser.add_argument("--workload", choices=("synthetic", "real"), default="synthetic",
                        help="fixed-shape random batches, or token-bucketed real text (docs/benchmarks.md)")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"),
                        help="where the real workload's corpora are (default ../shared/data)")
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "throughput"),
                        help="where the real workload's batches are cached (batches_width*.npz; delete to rebuild)")
    parser.add_argument("--bucket-width", type=positive(int), default=1,
                        help="real workload: batch lengths are padded to multiples of this (default 1)")
    parser.add_argument("--steps", type=positive(int), help="timed training steps per contender "
                        "(default 30; real workload: two passes over its batches)")
    parser.add_argument("--warmup", type=positive(int), help="untimed steps first (tracing, compiling; "
                        "default 5; real workload: one pass over its batches)")
    parser.add_argument("--only", nargs="*", choices=[*MODULES, "opennmt-tf"], help="contenders (default: all)")
    parser.add_argument("--opennmt-python", default=str(ROOT / ".venv-opennmt" / "bin" / "python"))
    parser.add_argument("--rounds", type=positive(int), default=1,
                        help="run the contenders this many times, taking turns; report medians")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    real = args.workload == "real"
    batches = load_batches(args.workload, args.data_dir, args.work_dir, args.bucket_width)  # real: built, cached
    if args.steps is None:
        args.steps = 2 * len(batches) if real else 30
    if args.warmup is None:
        args.warmup = len(batches) if real else 5
    names = args.only or [*MODULES, "opennmt-tf"]
    # Padding counts in the FLOPs, not in the tokens.
    cycle_tokens = sum(target_tokens(batches))
    flops_per_token = sum(training_flops(SIZE, labels.shape[0], source.shape[1], labels.shape[1])
                          for source, _, labels in batches) / cycle_tokens
    opennmt = OpenNMT(args.opennmt_python)

    def run_contender(name):
        """One timed run of `name` in its own process; None if it is not installed."""
        if name == "opennmt-tf":
            if not opennmt.available():
                print(f"  skipped: {args.opennmt_python} not found ({INSTALL})", file=sys.stderr)
                return None
            return {"name": name, "backend": opennmt.backend,
                    **opennmt.train_steps(None, batches, args.steps, args.warmup, real=real)}
        env = dict(os.environ, KERAS_BACKEND=contender(name).backend, TF_CPP_MIN_LOG_LEVEL="2")
        command = [sys.executable, __file__, "--worker", name, "--workload", args.workload,
                   "--data-dir", args.data_dir, "--work-dir", args.work_dir,
                   "--bucket-width", str(args.bucket_width),
                   "--steps", str(args.steps), "--warmup", str(args.warmup)]
        result = _harness.worker_result(command, env=env, cwd=ROOT)
        if "error" in result:
            raise SystemExit(f"contender {name} failed: {result['error']}")
        return result

    # Contenders take turns, round after round: this VM's speed drifts by tens
    # of percent over minutes, and a ratio taken within one round (minutes
    # apart) is steadier than one between runs far apart.
    record = _harness.start("train_throughput")
    rounds = []
    for index in range(args.rounds):
        current = {}
        for name in names:
            print(f"round {index + 1}/{args.rounds}: running {name} ...", file=sys.stderr, flush=True)
            result = run_contender(name)
            if result is not None:
                current[name] = result
        rounds.append(current)
    # After the contenders: the floor's operands (gigabytes for the real
    # workload) would otherwise raise this process's peak RSS, which Linux
    # hands on to every child it starts.
    floor_rate = cycle_tokens / matmul_floor_seconds(batches)
    reference = "ours-tf" if "ours-tf" in rounds[0] else next(iter(rounds[0]))
    results = []
    for name, first in rounds[0].items():
        rates = [r[name]["tokens_per_s"] for r in rounds]
        ratios = [r[name]["tokens_per_s"] / r[reference]["tokens_per_s"] for r in rounds]
        results.append({"name": name, "backend": first["backend"], "tokens_per_s": statistics.median(rates),
                        "vs_reference": statistics.median(ratios), "vs_reference_range": [min(ratios), max(ratios)],
                        "peak_mb": max(r[name]["peak_mb"] for r in rounds), "tokens_per_s_by_round": rates,
                        "label": opennmt.label if name == "opennmt-tf" else contender(name).label})

    # On real text OpenNMT-tf batches the sentences itself, while the floor (and the FLOPs per
    # token) come from our batches: the table marks its share.
    ours_batches_only = {"opennmt-tf"} if real else set()
    record.update({
        "workload": {"kind": args.workload, "bucket_width": args.bucket_width if real else None,
                     "batches": len(batches), "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
                     "config": SIZE, "target_tokens_per_batch": cycle_tokens / len(batches)},
        "reference": reference, "flops_per_target_token": flops_per_token, "matmul_floor_tokens_per_s": floor_rate,
        "floor_from_our_batches": sorted(ours_batches_only & {r["name"] for r in results}),
        "labels": {r["name"]: r["label"] for r in results},
        # Every contender's raw figures, round by round (OpenNMT-tf's with its logged intervals).
        "rounds": rounds, "results": results,
    })
    _harness.finish(record)
    print(f"\n{flops_per_token / 1e6:.1f} MFLOP per non-pad target token; matmul floor {floor_rate:.0f} tokens/s\n")
    print(throughput_table([record], {}))  # the table benchmarks/README.md shows, from this record
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
