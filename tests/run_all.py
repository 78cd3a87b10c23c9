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
(each worker holds its own TensorFlow). The torch run is one process on one
thread: it runs beside the others rather than after them (its output is
printed when it ends), using the core it would leave idle.

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
    runs = [Run(index, backend, paths, parallel if spread else [], report_dir, extra_args)
            for index, (backend, paths, spread) in enumerate(RUNS)]
    # The one-process run (torch, one thread) keeps one core busy and leaves the
    # other idle: with workers, it runs beside the others instead of after them,
    # its output printed when it ends.
    beside = [run for run in runs if not run.parallel] if workers else []
    for run in beside:
        run.start(log=report_dir / f"run{run.index}-{run.backend}.log")
    for run in runs:
        if run not in beside:
            run.start()
        run.finish(totals, failed_runs)
    if failed_runs:
        print("failed runs: " + "; ".join(failed_runs))
    print(f"total: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if failed_runs or totals["failed"] else 0


class Run:
    """One pytest process over `paths` under one Keras backend."""

    def __init__(self, index, backend, paths, parallel, report_dir, extra_args):
        self.index, self.backend, self.paths, self.parallel = index, backend, paths, parallel
        self.report = report_dir / f"run{index}-{backend}.xml"
        self.command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={self.report}", *parallel, *paths, *extra_args]
        self.env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
        if backend == "torch":
            # The torch tests' models are tiny: eager PyTorch gains nothing from a
            # second OpenMP thread, and its threads wait on each other whenever a
            # core is busy elsewhere (test_search_references' 8 standard-beam cases:
            # 20 s on one thread, 97 s on the default two, on a shared 2-core machine).
            self.env.setdefault("OMP_NUM_THREADS", "1")
        if backend == "jax":
            # The JAX tests are mostly XLA compiles of small programs, which LLVM's
            # optimisation passes dominate; compiled at level 0 the programs run
            # the same operations (XLA's own passes are untouched) and the run
            # takes 211 s instead of 295 s on 2 cores. Not for TensorFlow: it
            # compiles with XLA only where a test asks, and measured no gain.
            self.env.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 "
                                             "--xla_llvm_disable_expensive_passes=true")
        self.log = None

    @property
    def title(self):
        return f"KERAS_BACKEND={self.backend} pytest {' '.join(self.paths)}"

    def start(self, log=None):
        self.log = log
        if log is None:
            print(f"\n=== {self.title}", flush=True)
            self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env)
        else:
            print(f"\n=== {self.title}: started beside the others, output in {log}", flush=True)
            with open(log, "wb") as output:
                self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=output,
                                                stderr=subprocess.STDOUT)
        self.started = time.time()

    def finish(self, totals, failed_runs):
        code = self.process.wait()
        seconds = time.time() - self.started
        if self.log is not None:
            print(f"\n=== {self.title} (ran beside the others)", flush=True)
            sys.stdout.write(self.log.read_text(encoding="utf-8", errors="replace"))
        took = f"ended within {seconds:.0f}s" if self.log is not None else f"in {seconds:.0f}s"
        print(f"=== {self.backend} {' '.join(self.paths)}: exit {code} {took}", flush=True)
        if self.report.exists():
            suite = ElementTree.parse(self.report).getroot()
            suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
            tests, failures = int(suite.get("tests")), int(suite.get("failures"))
            errors, skipped = int(suite.get("errors")), int(suite.get("skipped"))
            totals["failed"] += failures + errors
            totals["skipped"] += skipped
            totals["passed"] += tests - failures - errors - skipped
        if code != 0:
            failed_runs.append(f"{self.backend}:{' '.join(self.paths)} (exit {code})")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
