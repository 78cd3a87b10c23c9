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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # this checkout's package, not an installed one

import _harness  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CLI = [sys.executable, "-m", "keras_transformer.cli"]
STEP_LINE = re.compile(r"^step (\d+)\b")


def write_corpus(path, size, data_dir=SHARED):
    """`size` numbered pairs from ddtp_en_de and po_all, as TSV."""
    pairs = []
    for name in ("ddtp_en_de", "po_all"):
        with gzip.open(Path(data_dir) / f"{name}.jsonl.gz", "rt", encoding="utf-8") as stream:
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


def run_settings(corpus, output_dir, steps, sample_pairs=500_000):
    return ["--train", str(corpus), "--output-dir", str(output_dir),
            "--set", "model.preset=tiny", "--set", "data.vocabulary_size=8000", "--set", "data.max_length=128",
            "--set", "training.tokens_per_batch=4096", "--set", f"training.max_steps={steps}",
            "--set", "training.save_every_steps=5", "--set", "training.progress_every_steps=1",
            "--set", "training.average_last=1", "--set", f"data.tokenizer_sample_pairs={sample_pairs}"]


def open_prepared(prepared_dir):
    from keras_transformer.data.prepare import Prepared, current_version, read_manifest

    return Prepared(current_version(prepared_dir), read_manifest(prepared_dir), "")


def data_start(prepared_dir, corpus):
    """Seconds from the check of the prepared data (by size and time) to the first batch, at step 0 and
    at a resumed step of epoch 3 (whose order is computed then), as `train` does them."""
    from keras_transformer.data import default_bucket_boundaries, read_tsv
    from keras_transformer.data.batch_plan import BatchPlan
    from keras_transformer.data.prepare import prepare as prepare_data

    seconds = {}
    for name in ("start", "resume"):
        start = time.perf_counter()
        manifest = open_prepared(prepared_dir).manifest
        prepared = prepare_data(prepared_dir, inputs=[str(corpus)], open_pairs=lambda: read_tsv(corpus),
                                settings=manifest["settings"], tokenizer_proto=Path(open_prepared(
                                    prepared_dir).tokenizer_path).read_bytes(), on_change="error", build=False)
        plan = BatchPlan(prepared.lengths(), default_bucket_boundaries(128, min_boundary=1, growth=1, multiple=1),
                         4096, seed=0, max_length=128)
        plan.record()
        step = 0 if name == "start" else 3 * plan.steps_per_epoch + 7
        prepared.shards().batch(*plan.batch(step))
        seconds[name] = time.perf_counter() - start
    return seconds


def one_core(prepared_dir, args):
    """Run in a process of its own, on one core (`--one-core`): input batches/s of 25,000 tokens
    with a warm and a cold page cache (the shards' pages dropped with posix_fadvise before each
    cold round), and the batch plan's memory (tracemalloc: NumPy's arrays) for 1 and 8 local replicas."""
    import tracemalloc

    from keras_transformer.data import default_bucket_boundaries
    from keras_transformer.data.batch_plan import BatchPlan
    from keras_transformer.data.streaming import stream_batches

    prepared = open_prepared(prepared_dir)
    lengths, shards = prepared.lengths(), prepared.shards()
    boundaries = default_bucket_boundaries(128, min_boundary=1, growth=1, multiple=1)

    def plan_megabytes(make_plans):
        tracemalloc.start()
        plans = make_plans()
        for plan in plans:
            for share in plan.shares:
                plan.batch(0, share)
            if plan.ahead:
                plan._epochs[1].result()
        megabytes = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        return megabytes

    result = {"plan_memory_mb": {
        "1 replica": plan_megabytes(lambda: [BatchPlan(lengths, boundaries, 25_000, max_length=128)]),
        "8 replicas, one plan": plan_megabytes(lambda: [BatchPlan(lengths, boundaries, 25_000, max_length=128,
                                                                  num_workers=8, shares=range(8))]),
        "8 replicas, a plan each (before)": plan_megabytes(lambda: [BatchPlan(
            lengths, boundaries, 25_000, max_length=128, num_workers=8, worker=w, ahead=False) for w in range(8)]),
    }}
    plan = BatchPlan(lengths, boundaries, 25_000, max_length=128)
    rates = {"cold": [], "warm": []}
    for turn in range(args.rounds):
        for cache in rates:  # the same batches: cold, then again from the cache the first read filled
            if cache == "cold":
                for entry in prepared.manifest["shards"]:
                    with open(Path(prepared.directory) / (entry["name"] + ".tokens"), "rb") as handle:
                        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            start = time.perf_counter()
            stream = iter(stream_batches(shards, plan, 1000 * turn))
            for _ in range(args.batches):
                next(stream)
            rates[cache].append(args.batches / (time.perf_counter() - start))
    result["input_25k_batches_per_second"] = rates
    return result


def measure(size, work, args):
    corpus = write_corpus(work / f"corpus-{size}.tsv", size, args.data_dir)
    run_dir = work / f"run-{size}"
    result = {"pairs": size, "corpus_bytes": corpus.stat().st_size}
    run = run_settings(corpus, run_dir, args.train_steps, args.sample_pairs)
    _, seconds, rss, output = run_command(["prepare", *run])
    from keras_transformer.data.prepare import current_version

    version = Path(current_version(run_dir / "prepared"))
    manifest = json.loads((version / "manifest.json").read_text())
    result["prepare"] = {"seconds": seconds, "peak_rss_mb": rss, "tokens": manifest["counts"]["tokens"],
                         "shards": len(manifest["shards"]), "prepared_bytes": sum(
                             f.stat().st_size for f in version.iterdir())}
    print(f"{size:,} pairs: prepared in {seconds:.0f}s, peak RSS {rss:.0f} MB", flush=True)
    _, again, _, output = run_command(["prepare", *run])
    assert output.startswith("up to date") or "\nup to date" in output, output[-2000:]
    result["prepare_again_seconds"] = again
    first, seconds, rss, _ = run_command(["train", *run])
    result["train"] = {"seconds_to_first_step": first, "seconds": seconds, "steps": args.train_steps,
                       "peak_rss_mb": rss}
    print(f"  train: first step after {first:.1f}s, peak RSS {rss:.0f} MB over {args.train_steps} steps", flush=True)
    resume_dir = work / f"resume-{size}"
    resume_dir.mkdir()
    os.symlink(run_dir / "prepared", resume_dir / "prepared")  # the same prepared data, a new run
    settings = run_settings(corpus, resume_dir, 10_000, args.sample_pairs)
    run_command(["train", *settings], stop_after_step=args.kill_after)
    first, _, _, output = run_command(["train", *settings, "--set", f"training.max_steps={args.kill_after + 2}"])
    steps = [int(m.group(1)) for m in re.finditer(r"^step (\d+)", output, re.M)]
    result["resume"] = {"killed_after_step": args.kill_after, "first_step_after_resume": steps[0] if steps else None,
                        "seconds_to_first_step": first}
    print(f"  killed after step {args.kill_after}, resumed: step {steps[0] if steps else '?'} after {first:.1f}s",
          flush=True)
    result["data_start_seconds"] = data_start(run_dir / "prepared", corpus)
    print(f"  data start: {result['data_start_seconds']}", flush=True)
    pinned = subprocess.run([sys.executable, __file__, "--one-core", str(run_dir / "prepared"), "--rounds",
                             str(args.rounds), "--batches", str(args.batches)], capture_output=True, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    if pinned.returncode:
        raise RuntimeError(f"--one-core failed:\n{pinned.stderr[-3000:]}")
    result.update(json.loads(pinned.stdout.splitlines()[-1]))
    rates = result["input_25k_batches_per_second"]
    print(f"  one core: {result['plan_memory_mb']}, " + ", ".join(
        f"{cache} {statistics.median(values):.0f} batches/s" for cache, values in rates.items()), flush=True)
    from keras_transformer.data.prepare import prepare as prepare_data
    from keras_transformer.data import read_tsv

    manifest = json.loads((version / "manifest.json").read_text())
    result["prepare_shards_seconds"] = {"pairs": args.processes_pairs}
    with open(corpus, encoding="utf-8") as whole, open(work / "prefix.tsv", "w", encoding="utf-8") as prefix:
        prefix.writelines(line for _, line in zip(range(args.processes_pairs), whole))
    for processes in (1, 2):  # with the run's tokenizer: tokenizing and writing the shards of a prefix
        start = time.perf_counter()
        prefix = work / "prefix.tsv"
        prepare_data(work / f"processes-{processes}", inputs=[str(prefix)], open_pairs=lambda: read_tsv(prefix),
                     settings=manifest["settings"], tokenizer_proto=(version / "tokenizer.model").read_bytes(),
                     pairs_per_shard=manifest["settings"]["data.pairs_per_shard"], processes=processes)
        result["prepare_shards_seconds"][processes] = time.perf_counter() - start
    print(f"  shards written by 1 and 2 processes: {result['prepare_shards_seconds']}", flush=True)
    return result


def main(argv=None):
    parser = _harness.parser(__doc__, "data_scale", aliases=("--output",))
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 4_500_000])
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--kill-after", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--sample-pairs", type=int, default=500_000, help="data.tokenizer_sample_pairs")
    parser.add_argument("--processes-pairs", type=int, default=1_000_000,
                        help="pairs of the corpus prepared by 1 and by 2 processes, to compare")
    parser.add_argument("--data-dir", default=SHARED, help="where ddtp_en_de and po_all are (../shared/data)")
    parser.add_argument("--work-dir", help="where the corpora and runs go (default: a temporary directory)")
    parser.add_argument("--one-core", metavar="PREPARED_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_core:
        import keras_transformer  # noqa: F401  (the package's start-up settings)

        print(json.dumps(one_core(args.one_core, args)))
        return
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
    _harness.save(args.record, _harness.finish(record))


if __name__ == "__main__":
    main()
