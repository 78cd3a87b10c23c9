"""Where a float32 training step's time goes: TensorFlow op time by op type, ours
against the like-for-like KerasHub-layer model, profiled in one process.

    KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/train_profile.py --workload real
    KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/train_profile.py --workload synthetic

Rates from `train_throughput.py` say which model trains faster; they cannot say
whether the two do different work or the same work at different speeds.
This script builds ours (`train_variants.build("shipped")`) and the
like-for-like KerasHub-layer model (`_contender_keras_hub`, `keras-hub-tied`:
our loss and optimizer) in one process, on the same workloads, warms both up
(two passes, every shape traced), then takes turns for `--rounds` rounds: each
turn runs one pass over the batches under `tf.profiler` and sums, from the
trace, the time of every TensorFlow kernel on the executor's threads by op
type. Kernels may overlap (two executor threads on two cores), so op time is
CPU time spent in kernels, not wall time; the wall time of the profiled pass
is recorded beside it.

OpenNMT-tf (`--opennmt-python`, default .venv-opennmt/bin/python; fixed-shape
workload only, as on real text it batches the sentences itself) cannot share
the process: each round it trains in its own process with its own trainer
(`_contender_opennmt.run_opennmt`), a profiler running there from `--opennmt-wait`
seconds for `--opennmt-span` seconds (past its tracing), and its figures
cover the complete steps inside that window: the kernels that start between
the end of one `apply_gradients` call and the end of a later one.

Records go to benchmarks/results/train_profile.jsonl; `report.py` makes the
table (`<!-- table:train-profile -->`).
"""

import argparse
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import _records, report  # noqa: E402
from benchmarks import _workloads as workloads  # noqa: E402
from benchmarks._contender_opennmt import OpenNMT  # noqa: E402

CONTENDERS = {
    "ours-tf": "ours, TensorFlow, plain graph",
    "keras-hub-tied": "KerasHub layers at our exact size, our loss and paper_optimizer",
    "opennmt-tf": "OpenNMT-tf 2.32 onmt-main, its own trainer and process (TensorFlow 2.13)",
}
# OpenNMT-tf's trainer ends each step with one call of this tf.function.
OPENNMT_STEP_END = "__inference__apply_gradients"
OPENNMT_PRELUDE = """
import atexit, threading, time
import tensorflow as tf
_state = []
def _stop():
    if _state == ["started"]:
        _state.append("stopped")
        tf.profiler.experimental.stop()
def _profile():
    time.sleep({wait})
    tf.profiler.experimental.start({logdir!r})
    _state.append("started")
    time.sleep({span})
    _stop()
atexit.register(_stop)  # a trainer that ends first still leaves its trace
threading.Thread(target=_profile, daemon=True).start()
"""
# An op event of the executor is named "<node name>:<op type>"; the executor's own events
# ("ExecutorState::Process", ...) and function calls ("__inference_...") are not kernels.
OP_EVENT = re.compile(r"^(?P<node>[^:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")


def host_lines(xplane_path):
    """(line, {metadata id: name}, line start in ps) of the host plane of a trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(xplane_path).read_bytes())
    for plane in space.planes:
        if plane.name == "/host:CPU":
            names = {key: metadata.name for key, metadata in plane.event_metadata.items()}
            for line in plane.lines:
                yield line, names, line.timestamp_ns * 1000


def op_seconds_by_type(xplane_path, window=None):
    """{op type: seconds} summed over the kernels run on TensorFlow's executor threads; with
    `window` = (start, end) in picoseconds, only the kernels that start inside it."""
    seconds = Counter()
    for line, names, start in host_lines(xplane_path):
        if not line.name.startswith("tf_Compute"):
            continue
        for event in line.events:
            match = OP_EVENT.match(names[event.metadata_id])
            if not match or match["type"].startswith("__inference"):
                continue
            if window and not window[0] <= start + event.offset_ps < window[1]:
                continue
            seconds[match["type"]] += event.duration_ps / 1e12
    return dict(seconds)


def complete_steps(xplane_path, step_end=OPENNMT_STEP_END):
    """(number of complete steps, window start, window end in ps): from the end of the first call
    named `step_end` to the end of the last, on the thread that made the most such calls."""
    ends_by_line = {}
    for line, names, start in host_lines(xplane_path):
        ends = [start + e.offset_ps + e.duration_ps for e in line.events if step_end in names[e.metadata_id]]
        if ends:
            ends_by_line[line.name] = sorted(ends)
    ends = max(ends_by_line.values(), key=len, default=[])
    if len(ends) < 2:
        raise ValueError(f"{xplane_path}: fewer than two {step_end} calls in the trace (profile a longer window)")
    return len(ends) - 1, ends[0], ends[-1]


def profile_opennmt(batches, python, wait, span, logdir):
    """One OpenNMT-tf training run in its own process, profiled from `wait` to `wait + span` seconds."""
    steps = int((wait + span) * 2)  # past the window here (1.4 steps/s); a run that ends first stops it early
    prelude = OPENNMT_PRELUDE.format(wait=wait, span=span, logdir=str(logdir))
    OpenNMT(python).train_steps(None, batches, steps, 5, real=False, prelude=prelude)
    traces = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"))
    if not traces:
        raise SystemExit(f"train_profile.py: OpenNMT-tf's profiler wrote no trace under {logdir}")
    count, start, end = complete_steps(traces[-1])
    return {"wall_seconds": (end - start) / 1e12, "steps": count,
            "op_seconds": op_seconds_by_type(traces[-1], (start, end))}


def build(name):
    import keras

    if name == "ours-tf":
        from benchmarks import train_variants

        return train_variants.build("shipped")
    from benchmarks._contender_keras_hub import THROUGHPUT

    keras.utils.set_random_seed(0)
    return THROUGHPUT["keras-hub-tied"].build(workloads.SIZE)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("synthetic", "real"), default="real",
                        help="train_throughput.py's workloads: fixed-shape random batches, or real text")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "throughput"),
                        help="where the real workload's batches are cached (shared with train_throughput.py)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--opennmt-python", default=str(ROOT / ".venv-opennmt" / "bin" / "python"),
                        help="OpenNMT-tf's Python (fixed-shape workload only; skipped with a message where absent)")
    parser.add_argument("--opennmt-wait", type=float, default=45.0,
                        help="seconds after OpenNMT-tf's start before its profiler starts (past its tracing)")
    parser.add_argument("--opennmt-span", type=float, default=30.0, help="seconds OpenNMT-tf is profiled")
    parser.add_argument("--record", default=_records.default_path("train_profile"),
                        help="JSON-lines file the record is appended to (default %(default)s; '' for none)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        raise SystemExit("train_profile.py profiles the TensorFlow training step: set KERAS_BACKEND=tensorflow")
    batches = workloads.load_batches(args.workload, args.data_dir, args.work_dir)
    counts = workloads.target_tokens(batches)
    dataset = workloads.cycled_dataset(batches)

    names = ["ours-tf", "keras-hub-tied"]
    opennmt = args.workload == "synthetic" and Path(args.opennmt_python).exists()
    if args.workload == "synthetic" and not opennmt:
        print(f"OpenNMT-tf left out: {args.opennmt_python} does not exist", file=sys.stderr)
    record = _records.start("train_profile")
    models, iterators = {}, {}
    for name in names:
        print(f"building and warming up {name} ...", file=sys.stderr, flush=True)
        models[name] = build(name)
        # Every shape traced; a later pass of len(batches) steps sees each batch once.
        iterators[name] = workloads.warmed_up(models[name], dataset, 2 * len(batches))
    rounds = []
    with tempfile.TemporaryDirectory() as logs:
        for index in range(args.rounds):
            current = {}
            for name in (names if index % 2 == 0 else names[::-1]):
                model, logdir = models[name], Path(logs) / f"{index}-{name}"
                tf.profiler.experimental.start(str(logdir))
                start = time.perf_counter()
                for _ in range(len(batches)):  # one pass: every batch once
                    outputs = model.train_function(iterators[name])
                float(outputs["loss"])
                wall = time.perf_counter() - start
                tf.profiler.experimental.stop()
                traces = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
                if not traces:
                    raise SystemExit(f"train_profile.py: the profiler wrote no trace under {logdir}")
                current[name] = {"wall_seconds": wall, "steps": len(batches), "target_tokens": sum(counts),
                                 "op_seconds": op_seconds_by_type(traces[-1])}
            if opennmt:
                print("OpenNMT-tf, its own process ...", file=sys.stderr, flush=True)
                current["opennmt-tf"] = profile_opennmt(batches, args.opennmt_python, args.opennmt_wait,
                                                        args.opennmt_span, Path(logs) / f"{index}-opennmt-tf")
            rounds.append(current)
            print(f"round {index + 1}/{args.rounds}: " + ", ".join(
                f"{n} {sum(current[n]['op_seconds'].values()) / current[n]['steps']:.3f} s of kernels per step, "
                f"{current[n]['wall_seconds'] / current[n]['steps']:.3f} s wall" for n in current),
                file=sys.stderr, flush=True)

    record.update({
        "workload": {"kind": args.workload, "batches": len(batches), "rounds": args.rounds, "warmup_passes": 2,
                     "config": workloads.SIZE, "target_tokens_per_batch": sum(counts) / len(batches)},
        "reference": "ours-tf", "rounds": rounds,
        "results": [{"name": name, "label": CONTENDERS[name]} for name in names + ["opennmt-tf"] * opennmt],
    })
    _records.finish(record)
    print("\n" + report.profile_table([record], {}))
    _records.save(args.record, record)


if __name__ == "__main__":
    main()
