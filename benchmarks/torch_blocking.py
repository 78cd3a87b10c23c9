"""The cost of n-gram blocking in beam search under PyTorch (issue 33's goal: within 1.2x).

Beam search on decode.py's workload (tiny preset, random weights, a batch of
`--batch-size` sources of `--source-length` tokens, exactly `--steps`
tokens generated: EOS is forbidden by min_length = max_output_length), with
`no_repeat_ngram_size` 0 (off) and then each size in `--ngram-sizes`. The
contenders take turns within each round, so that load on a shared machine
falls on all of them alike; the ratio of a blocking contender is the median
of its same-round ratios to the search without blocking. PyTorch runs the
search eagerly under `torch.no_grad()` (keras_transformer.decoding.compiled).

Before the loop-free ban (decoding/constraints.py), Keras' torch
`ops.scatter` looped in Python over every row and buffer entry at every step.
Until the bans became a scatter of -inf into the logits that the blockwise
top-k reads (decoding/candidates.py), a blocked step took a top-k over whole
rows instead (1.29x, record of 888ac3c).

Usage:
    KERAS_BACKEND=torch python benchmarks/torch_blocking.py [--rounds 3]

Appends a record to benchmarks/results/torch_blocking.jsonl (`--record`).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _records  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50, help="tokens generated per sentence")
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--ngram-sizes", default="3", help="comma-separated no_repeat_ngram_size values")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per contender")
    parser.add_argument("--record", default=_records.default_path("torch_blocking"))
    return parser.parse_args(argv)


def table_parts(record):
    """(what, header, rows) of a record's table: per contender the median seconds and range, and the median
    and range of its same-round ratios to the search without blocking (benchmarks/report.py)."""
    workload, rounds, reference = record["workload"], record["rounds"], record["reference"]
    rows = []
    for name in rounds[0]:
        seconds = [r[name] for r in rounds]
        ratios = [r[name] / r[reference] for r in rounds]
        rows.append([name, f"{statistics.median(seconds):.2f}", f"{min(seconds):.2f}-{max(seconds):.2f}",
                     f"{statistics.median(ratios):.2f}x", f"{min(ratios):.2f}-{max(ratios):.2f}x"])
    header = ["beam search", "seconds (median)", "range", f"vs {reference}", "range of same-round ratios"]
    what = (f"PyTorch, eager, tiny preset, beam {workload['beam_size']}, {workload['batch_size']} sentences of "
            f"{workload['source_length']} tokens, {workload['steps']} tokens generated, {len(rounds)} rounds")
    return what, header, rows


def main(argv=None):
    args = parse_args(argv)
    import keras

    if keras.backend.backend() != "torch":
        raise SystemExit("torch_blocking.py measures the PyTorch backend: run it with KERAS_BACKEND=torch")
    import keras_transformer as kt
    from keras_transformer.decoding import beam_search
    from keras_transformer.special_tokens import EOS_ID

    record = _records.start("torch_blocking")
    keras.utils.set_random_seed(0)
    model = kt.Transformer.from_preset("tiny", vocabulary_size=args.vocabulary_size)  # built, random weights
    rng = np.random.default_rng(0)
    source = rng.integers(4, args.vocabulary_size, size=(args.batch_size, args.source_length)).astype("int32")
    source[:, -1] = EOS_ID
    fixed = dict(beam_size=args.beam_size, max_output_length=args.steps, min_length=args.steps,
                 max_extra_length=args.steps)
    sizes = [0] + [int(n) for n in args.ngram_sizes.split(",") if n]
    names = {n: "no blocking" if n == 0 else f"no_repeat_ngram_size={n}" for n in sizes}

    def run(n):
        result = beam_search(model, source, no_repeat_ngram_size=n, **fixed)
        return keras.ops.convert_to_numpy(result["ids"])

    for n in sizes:  # a first run each, not timed
        run(n)
    rounds = []
    for index in range(args.rounds):
        seconds = {}
        for n in sizes:
            start = time.perf_counter()
            run(n)
            seconds[names[n]] = time.perf_counter() - start
        rounds.append(seconds)
        print(f"round {index + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()), flush=True)
    record.update(workload={"preset": "tiny", "batch_size": args.batch_size, "source_length": args.source_length,
                            "steps": args.steps, "vocabulary_size": args.vocabulary_size,
                            "beam_size": args.beam_size},
                  reference="no blocking", rounds=rounds)
    _records.finish(record)
    for n in sizes[1:]:
        ratio = statistics.median(r[names[n]] / r["no blocking"] for r in rounds)
        print(f"{names[n]}: {ratio:.2f}x the search without blocking (median of same-round ratios; goal <= 1.2x)")
    _records.save(args.record, record)


if __name__ == "__main__":
    main()
