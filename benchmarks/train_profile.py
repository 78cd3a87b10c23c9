"""Where a float32 training step's time goes: TensorFlow op time by op type, ours
against the like-for-like KerasHub-layer model, profiled in one process.

    KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/train_profile.py --workload real
    KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/train_profile.py --workload synthetic

Rates from `train_throughput.py` say which model trains faster; they cannot say
whether the two do different work or the same work at different speeds.
This script builds ours (`train_variants.build("shipped")`) and the
like-for-like KerasHub-layer model (`train_throughput.build_keras_hub_tied`,
our loss and optimizer) in one process, on the same workloads, warms both up
(two passes, every shape traced), then takes turns for `--rounds` rounds: each
turn runs one pass over the batches under `tf.profiler` and sums, from the
trace, the time of every TensorFlow kernel on the executor's threads by op
type. Kernels may overlap (two executor threads on two cores), so op time is
CPU time spent in kernels, not wall time; the wall time of the profiled pass
is recorded beside it.

Records go to benchmarks/results/train_profile.jsonl; `report.py` makes the
table (`<!-- table:train-profile -->`).
"""

import argparse
import functools
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
from benchmarks import train_throughput as workloads  # noqa: E402

CONTENDERS = {
    "ours-tf": "ours, TensorFlow, plain graph",
    "keras-hub-tied": "KerasHub layers at our exact size, our loss and paper_optimizer",
}
# An op event of the executor is named "<node name>:<op type>"; the executor's own events
# ("ExecutorState::Process", ...) and function calls ("__inference_...") are not kernels.
OP_EVENT = re.compile(r"^(?P<node>[^:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")


def op_seconds_by_type(xplane_path):
    """{op type: seconds} summed over the kernels run on TensorFlow's executor threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(xplane_path).read_bytes())
    seconds = Counter()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                match = OP_EVENT.match(plane.event_metadata[event.metadata_id].name)
                if match and not match["type"].startswith("__inference"):
                    seconds[match["type"]] += event.duration_ps / 1e12
    return dict(seconds)


def build(name):
    import keras

    from keras_transformer.training import LabelSmoothedCrossEntropy, paper_optimizer

    if name == "ours-tf":
        from benchmarks import train_variants

        return train_variants.build("shipped")
    keras.utils.set_random_seed(0)
    model = workloads.build_keras_hub_tied()
    model.compile(optimizer=paper_optimizer(workloads.CONFIG["d_model"]), loss=LabelSmoothedCrossEntropy(0.1))
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("synthetic", "real"), default="real",
                        help="train_throughput.py's workloads: fixed-shape random batches, or real text")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "throughput"),
                        help="where the real workload's batches are cached (shared with train_throughput.py)")
    parser.add_argument("--rounds", type=int, default=2)
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
    batches = (workloads.make_real_batches(args.data_dir, Path(args.work_dir), 1) if args.workload == "real"
               else workloads.make_batches())
    counts = workloads.target_tokens(batches)
    elements = [tf.data.Dataset.from_tensors(({"source": s, "target": t}, y)) for s, t, y in batches]
    dataset = functools.reduce(lambda a, b: a.concatenate(b), elements).repeat().prefetch(4)

    names = list(CONTENDERS)
    record = _records.start("train_profile")
    models, iterators = {}, {}
    for name in names:
        print(f"building and warming up {name} ...", file=sys.stderr, flush=True)
        models[name] = build(name)
        models[name].fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)  # builds the optimizer
        iterators[name] = iter(dataset)
        for _ in range(2 * len(batches)):  # every shape traced; a pass of len(batches) steps sees each batch once
            models[name].train_function(iterators[name])
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
            rounds.append(current)
            print(f"round {index + 1}/{args.rounds}: " + ", ".join(
                f"{n} {sum(current[n]['op_seconds'].values()):.2f} s of kernels, {current[n]['wall_seconds']:.2f} s"
                for n in names), file=sys.stderr, flush=True)

    record.update({
        "workload": {"kind": args.workload, "batches": len(batches), "rounds": args.rounds, "warmup_passes": 2,
                     "config": workloads.CONFIG, "target_tokens_per_batch": sum(counts) / len(batches)},
        "reference": "ours-tf", "rounds": rounds,
        "results": [{"name": name, "label": CONTENDERS[name]} for name in names],
    })
    _records.finish(record)
    print("\n" + report.profile_table([record], {}))
    if args.record:
        _records.append(args.record, record)
        print(f"record appended to {os.path.relpath(args.record, ROOT)}")


if __name__ == "__main__":
    main()
