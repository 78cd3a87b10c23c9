"""Training on corpora of any size: prepared once, started and resumed in seconds, in bounded memory.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `data_scale.py`.

Usage (appends one record to benchmarks/results/data_scale.jsonl):

    KERAS_BACKEND=tensorflow python benchmarks/data_scale.py --sizes 100000 1000000 4500000
"""

import argparse
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CLI = [sys.executable, "-m", "keras_transformer.cli"]
STEP_LINE = re.compile(r"^step (\d+)\b")


def write_corpus(path, size):
    """`size` numbered pairs from ddtp_en_de and po_all, as TSV."""
    pairs = []
    for name in ("ddtp_en_de", "po_all"):
        with gzip.open(SHARED / f"{name}.jsonl.gz", "rt", encoding="utf-8") as stream:
            for line in stream:
                record = json.loads(line)
                en, de = (" ".join(str(record.get(key) or "").split()) for key in ("en", "de"))
                if en and de:
                    pairs.append((en, de))
    with open(path, "w", encoding="utf-8") as out:
        for index in range(size):
            en, de = pairs[index % len(pairs)]
            out.write(f"{index} {en}\t{de} {index}\n")
    return path


def run_command(arguments, stop_after_step=None):
    """Runs a CLI command; returns (seconds to the first step line or None,
    seconds in all, peak RSS in MB, output). With `stop_after_step`, the
    process is killed (SIGKILL) once that step's line appears."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    start = time.monotonic()
    process = subprocess.Popen(CLI + arguments, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    first_step, lines = None, []
    for line in process.stdout:
        lines.append(line)
        match = STEP_LINE.match(line)
        if match and first_step is None:
            first_step = time.monotonic() - start
        if match and stop_after_step is not None and int(match.group(1)) >= stop_after_step:
            process.send_signal(signal.SIGKILL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    output = "".join(lines)
    if process.returncode != 0 and stop_after_step is None:
        raise RuntimeError(f"{' '.join(arguments)} failed:\n{output[-3000:]}")
    return first_step, time.monotonic() - start, usage.ru_maxrss / 1024, output


def run_settings(corpus, output_dir, steps):
    return ["--train", str(corpus), "--output-dir", str(output_dir),
            "--set", "model.preset=tiny", "--set", "data.vocabulary_size=8000", "--set", "data.max_length=128",
            "--set", "training.tokens_per_batch=4096", "--set", f"training.max_steps={steps}",
            "--set", "training.save_every_steps=5", "--set", "training.progress_every_steps=1",
            "--set", "training.average_last=1"]


def input_rates(prepared_dir, corpus, rounds, batches, with_in_memory):
    """Batches per second of the prepared stream (and of the in-memory pipeline), in turns."""
    import keras_transformer  # noqa: F401  (the package's start-up settings)
    from keras_transformer.data import SubwordTokenizer, default_bucket_boundaries, make_dataset, read_tsv
    from keras_transformer.data.batch_plan import BatchPlan
    from keras_transformer.data.prepare import prepare as prepare_data
    from keras_transformer.data.prepare import current_version, read_manifest
    from keras_transformer.data.streaming import stream_batches

    manifest = read_manifest(prepared_dir)
    prepared = prepare_data(prepared_dir, inputs=[str(corpus)], open_pairs=lambda: read_tsv(corpus),
                            settings=manifest["settings"], tokenizer_proto=open(Path(
                                current_version(prepared_dir)) / "tokenizer.model", "rb").read(),
                            on_change="error")
    boundaries = default_bucket_boundaries(128, min_boundary=1, growth=1, multiple=1)
    plan = BatchPlan(prepared.lengths(), boundaries, 4096, seed=0, max_length=128)
    stream = iter(stream_batches(prepared.shards(), plan, 0))
    contenders = {"prepared stream": stream}
    if with_in_memory:
        pairs, _ = read_tsv(corpus).load()
        tokenizer = SubwordTokenizer.load(prepared.tokenizer_path)
        in_memory = iter(make_dataset(pairs, tokenizer, tokens_per_batch=4096, max_length=128,
                                      bucket_boundaries=boundaries, seed=0, repeat=True))
        for _ in range(plan.steps_per_epoch + 10):  # fills the id cache: today's first epoch, not timed
            next(in_memory)
        contenders["in-memory pipeline"] = in_memory
    rates = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, iterator in contenders.items():
            start = time.perf_counter()
            for _ in range(batches):
                next(iterator)
            rates[name].append(batches / (time.perf_counter() - start))
    return rates


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def measure(size, work, args):
    corpus = write_corpus(work / f"corpus-{size}.tsv", size)
    run_dir = work / f"run-{size}"
    result = {"pairs": size, "corpus_bytes": corpus.stat().st_size}
    _, seconds, rss, output = run_command(["prepare", *run_settings(corpus, run_dir, args.train_steps)])
    from keras_transformer.data.prepare import current_version

    version = Path(current_version(run_dir / "prepared"))
    manifest = json.loads((version / "manifest.json").read_text())
    result["prepare"] = {"seconds": seconds, "peak_rss_mb": rss, "tokens": manifest["counts"]["tokens"],
                         "shards": len(manifest["shards"]), "prepared_bytes": sum(
                             f.stat().st_size for f in version.iterdir())}
    print(f"{size:,} pairs: prepared in {seconds:.0f}s, peak RSS {rss:.0f} MB", flush=True)
    _, again, _, output = run_command(["prepare", *run_settings(corpus, run_dir, args.train_steps)])
    assert output.startswith("up to date") or "\nup to date" in output, output[-2000:]
    result["prepare_again_seconds"] = again
    first, seconds, rss, _ = run_command(["train", *run_settings(corpus, run_dir, args.train_steps)])
    result["train"] = {"seconds_to_first_step": first, "seconds": seconds, "steps": args.train_steps,
                       "peak_rss_mb": rss}
    print(f"  train: first step after {first:.1f}s, peak RSS {rss:.0f} MB over {args.train_steps} steps", flush=True)
    resume_dir = work / f"resume-{size}"
    resume_dir.mkdir()
    os.symlink(run_dir / "prepared", resume_dir / "prepared")  # the same prepared data, a new run
    settings = run_settings(corpus, resume_dir, 10_000)
    run_command(["train", *settings], stop_after_step=args.kill_after)
    first, _, _, output = run_command(["train", *settings, "--set", f"training.max_steps={args.kill_after + 2}"])
    steps = [int(m.group(1)) for m in re.finditer(r"^step (\d+)", output, re.M)]
    result["resume"] = {"killed_after_step": args.kill_after, "first_step_after_resume": steps[0] if steps else None,
                        "seconds_to_first_step": first}
    print(f"  killed after step {args.kill_after}, resumed: step {steps[0] if steps else '?'} after {first:.1f}s",
          flush=True)
    rates = input_rates(run_dir / "prepared", corpus, args.rounds, args.batches, with_in_memory=size == args.sizes[0])
    result["input_batches_per_second"] = rates
    print("  input batches/s: " + ", ".join(f"{name} {median(values):.0f}" for name, values in rates.items()),
          flush=True)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 4_500_000])
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--kill-after", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--work-dir", help="where the corpora and runs go (default: a temporary directory)")
    parser.add_argument("--output", default=_harness.default_path("data_scale"))
    args = parser.parse_args(argv)
    record = _harness.start("data_scale", argv)
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        results = [measure(size, Path(work), args) for size in args.sizes]
    record["results"] = results
    if len(results) > 1:
        # Preparation time is linear in the corpus: a line through the two largest sizes.
        (a, ta), (b, tb) = [(r["pairs"], r["prepare"]["seconds"]) for r in results[-2:]]
        record["extrapolated_36m_prepare_seconds"] = tb + (36_000_000 - b) * (tb - ta) / (b - a)
        print(f"extrapolated: 36M pairs prepared in about {record['extrapolated_36m_prepare_seconds'] / 60:.0f} "
              "minutes", flush=True)
    _harness.save(args.output, _harness.finish(record))


if __name__ == "__main__":
    main()
