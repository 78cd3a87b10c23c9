"""Run the whole suite: the backend-agnostic tests under each Keras backend,
and the TensorFlow-only tests (tf.data, tokenizer, MirroredStrategy, export).

The TensorFlow run takes both at once (`pytest tests`): one start of its
workers instead of two, and the many short backend-agnostic files fill the
gaps that the long TensorFlow-only files leave at the end of a run.

Each run spreads its test files over worker processes (pytest-xdist,
`--dist loadfile`: a module's fixtures are built once): the suite is mostly
single-threaded tracing, compiling and subprocess start-up, so two workers
on two cores save a third of the time (tests/tf: 1262 s -> 853 s). `KT_TEST_WORKERS=N` picks N
(0: no workers, in process); the default is the machine's cores, at most 4
(each worker holds its own TensorFlow).

Prints one closing line that totals every run, and exits non-zero if any run
failed (a run that collects no test counts as a failure: it means the suite
is broken, not green).
"""

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("tensorflow", "jax", "torch")
# (backend, pytest paths, spread over workers). The TensorFlow run includes
# tests/tf. The torch run is short (eager, nothing to compile): starting
# workers costs it more (100 s) than it saves (47 s alone).
RUNS = [(backend, ["tests"] if backend == "tensorflow" else ["tests", "--ignore=tests/tf"], backend != "torch")
        for backend in BACKENDS]


def worker_count():
    chosen = os.environ.get("KT_TEST_WORKERS")
    if chosen is not None:
        if not chosen.isdigit():
            raise SystemExit(f"KT_TEST_WORKERS must be a whole number, not {chosen!r}")
        return int(chosen)
    return max(1, min(4, os.cpu_count() or 1))


def main(extra_args):
    workers = worker_count()
    parallel = ["-n", str(workers), "--dist", "loadfile"] if workers else []
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    failed_runs = []
    report_dir = ROOT / ".pytest_reports"
    report_dir.mkdir(exist_ok=True)
    for index, (backend, paths, spread) in enumerate(RUNS):
        report = report_dir / f"run{index}-{backend}.xml"
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
        if backend == "torch":
            # The torch tests' models are tiny: eager PyTorch gains nothing from a
            # second OpenMP thread, and its threads wait on each other whenever a
            # core is busy elsewhere (test_search_references' 8 standard-beam cases:
            # 20 s on one thread, 97 s on the default two, on a shared 2-core machine).
            env.setdefault("OMP_NUM_THREADS", "1")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={report}", *(parallel if spread else []), *paths, *extra_args]
        print(f"\n=== KERAS_BACKEND={backend} pytest {' '.join(paths)}", flush=True)
        start = time.time()
        code = subprocess.call(command, cwd=ROOT, env=env)
        print(f"=== {backend} {' '.join(paths)}: exit {code} in {time.time() - start:.0f}s", flush=True)
        if report.exists():
            suite = ElementTree.parse(report).getroot()
            suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
            tests, failures = int(suite.get("tests")), int(suite.get("failures"))
            errors, skipped = int(suite.get("errors")), int(suite.get("skipped"))
            totals["failed"] += failures + errors
            totals["skipped"] += skipped
            totals["passed"] += tests - failures - errors - skipped
        if code != 0:
            failed_runs.append(f"{backend}:{' '.join(paths)} (exit {code})")
    if failed_runs:
        print("failed runs: " + "; ".join(failed_runs))
    print(f"total: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if failed_runs or totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
