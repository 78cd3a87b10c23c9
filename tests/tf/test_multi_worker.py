"""MultiWorkerMirroredStrategy: two worker processes on localhost follow one device.

Two worker processes (CPU only, one device each, TF_CONFIG on free localhost
ports) train a tiny Transformer with `model.fit` (through `fit_resumable`)
on fixed global batches that do not split evenly over the workers (4 rows and
3 rows) and whose two parts hold very different numbers of target tokens.
They train 4 steps, then drop their training state and train again to step
8, resuming from the chief's checkpoint. The test process trains the same
model on one device over the same 8 global batches and compares the weights.
A hung collective fails the test through the workers' timeout.

This file is also the worker program (run as a script).
"""

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: reversal_task

from reversal_task import PAD, reversal_batches, tiny_transformer  # noqa: E402

STEPS = 4
# Odd: worker 0 gets 4 rows, worker 1 gets 3 (Keras' reduce of the first
# batch fails on that without the override); all equal, so each worker
# traces its step once.
BATCH_SIZES = (7, 7, 7, 7)
WORKER_TIMEOUT_S = 150


def global_batches(seed=0):
    """One epoch of global batches `[(inputs, labels), ...]`: in each, the
    first rows (worker 0's part) hold long targets and the rest short ones."""
    return reversal_batches(BATCH_SIZES, seed)


def global_dataset():
    import tensorflow as tf

    batches = [tf.data.Dataset.from_tensors(batch) for batch in global_batches()]
    return functools.reduce(lambda a, b: a.concatenate(b), batches)


def build_model():
    model = tiny_transformer()
    inputs, _ = global_batches()[0]
    # Weights and optimizer slots, built in the caller's scope (the strategy's
    # for the workers), before a checkpoint restores both.
    model({k: v[:1] for k, v in inputs.items()}, training=False)
    model.optimizer.build(model.trainable_variables)
    return model


def fit_errors_without_workaround(strategy, dataset):
    """What `model.fit` does with the plain MultiWorkerMirroredStrategy
    `reduce` (first call), and with only the nest case handled (second call).
    Returns the errors ("ok" if fit worked); restores the workaround."""
    import tensorflow as tf

    base_reduce = functools.partial(tf.distribute.MultiWorkerMirroredStrategy.reduce, strategy)

    def nests_only(reduce_op, value, axis):
        if tf.nest.is_nested(value):
            return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], value)
        return base_reduce(reduce_op, value, axis)

    outcomes = []
    with strategy.scope():
        throwaway = build_model()
    for reduce in (base_reduce, nests_only):
        strategy.reduce = reduce
        try:
            throwaway.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
            outcomes.append("ok")
        except Exception as error:  # what Keras raises is the point here
            outcomes.append(f"{type(error).__name__}: {error}"[:2000])
        finally:
            del strategy.reduce
    return outcomes


def worker(output_dir):
    # First thing: the strategy starts this worker's server.
    from keras_transformer.training.distribute import (
        is_chief,
        multi_worker_strategy,
        shard_by_data,
        worker_checkpoint_dir,
    )

    strategy = multi_worker_strategy("ring")
    import keras

    from keras_transformer.training import fit_resumable

    task = strategy.cluster_resolver.task_id
    report = {"task": task, "chief": is_chief(strategy), "replicas": strategy.num_replicas_in_sync}
    dataset = global_dataset()
    # This worker's part of each global batch, as fit gets it.
    report["shards"] = [
        strategy.experimental_local_results(labels)[0].numpy().tolist()
        for _, labels in strategy.experimental_distribute_dataset(shard_by_data(dataset))
    ]
    report["without_workaround"] = fit_errors_without_workaround(strategy, shard_by_data(dataset))

    class Record(keras.callbacks.Callback):
        def __init__(self, part):
            super().__init__()
            self.part = part

        def on_train_begin(self, logs=None):
            step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            self.part.setdefault("start_steps", []).append(step)

        def on_train_end(self, logs=None):
            self.part["files_at_end"] = sorted(os.listdir(self.part["checkpoint_dir"]))

    shared = os.path.join(output_dir, "checkpoints")
    with strategy.scope():
        model = build_model()
    initial = model.get_weights()
    if report["chief"]:
        np.savez(os.path.join(output_dir, "initial.npz"), *initial)
    # Train 4 steps, then lose the training state and run again for 8 steps:
    # every worker must restore the chief's step-4 checkpoint (the non-chief
    # from its copy) and go on from there.
    for name, epochs in (("first", 1), ("resumed", 2)):
        part = report[name] = {}
        with worker_checkpoint_dir(shared, strategy) as checkpoint_dir:
            part["checkpoint_dir"] = checkpoint_dir
            part["files_at_start"] = sorted(os.listdir(checkpoint_dir)) if os.path.isdir(checkpoint_dir) else []
            if name == "resumed":
                model.set_weights(initial)
                for variable in model.optimizer.variables:
                    variable.assign(keras.ops.zeros(variable.shape, variable.dtype))
            fit_resumable(
                model,
                lambda step: shard_by_data(dataset.repeat().skip(step)),
                epochs=epochs,
                steps_per_epoch=STEPS,
                checkpoint_dir=checkpoint_dir,
                save_every_steps=2,
                keep_last=2,
                callbacks=[Record(part)],
                verbose=0,
            )
        part["private_dir_left"] = checkpoint_dir != shared and os.path.exists(checkpoint_dir)
    np.savez(os.path.join(output_dir, f"worker{task}.npz"), *model.get_weights())
    with open(os.path.join(output_dir, f"worker{task}.json"), "w") as handle:
        json.dump(report, handle)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for item in sockets:
            item.bind(("localhost", 0))
        return [item.getsockname()[1] for item in sockets]
    finally:
        for item in sockets:
            item.close()


def launch_workers(output_dir, arguments=None, timeout_s=WORKER_TIMEOUT_S, returncodes=None):
    """Runs two workers to completion (each `python ARGUMENTS...`, by default
    this file's worker); kills both if one fails or hangs. Returns their logs.

    With a list `returncodes`, a worker that fails does not end the other:
    both run to their end (or the timeout), and their exit codes go there."""
    ports = free_ports(2)
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    processes, logs = [], []
    for index in range(2):
        env = dict(
            os.environ,
            KERAS_BACKEND="tensorflow",
            TF_CPP_MIN_LOG_LEVEL="2",
            CUDA_VISIBLE_DEVICES="",
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
        )
        log = open(output_dir / f"worker{index}.log", "w+")
        logs.append(log)
        processes.append(subprocess.Popen(
            [sys.executable, *(arguments or [os.path.abspath(__file__), "worker", str(output_dir)])],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        ))
    deadline = time.monotonic() + timeout_s
    failure = None
    while any(p.poll() is None for p in processes):
        if returncodes is None and any(p.poll() not in (None, 0) for p in processes):
            failure = "a worker failed"
            break
        if time.monotonic() > deadline:
            failure = f"workers still running after {timeout_s}s (hung collective?)"
            break
        time.sleep(0.2)
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if returncodes is not None:
        returncodes.extend(p.returncode for p in processes)
    elif failure is None and any(p.returncode != 0 for p in processes):
        failure = "a worker failed"
    if failure:
        tails = []
        for index, log in enumerate(logs):
            log.seek(0)
            tails.append(f"--- worker {index} (exit {processes[index].returncode}):\n{log.read()[-6000:]}")
        pytest.fail(f"{failure}\n" + "\n".join(tails))
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    return outputs


def load_weights(path):
    with np.load(path) as archive:
        return [archive[f"arr_{index}"] for index in range(len(archive.files))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("multi_worker")
    launch_workers(output_dir)
    reports = [json.loads((output_dir / f"worker{task}.json").read_text()) for task in (0, 1)]

    # One device, same initial weights, same 8 global batches.
    model = build_model()
    initial = load_weights(output_dir / "initial.npz")
    model.set_weights(initial)
    model.fit(global_dataset(), epochs=2, verbose=0)
    return {
        "dir": output_dir,
        "reports": reports,
        "initial": initial,
        "one_device": [np.asarray(w) for w in model.get_weights()],
        "paths": [v.path for v in model.weights],
        "workers": [load_weights(output_dir / f"worker{task}.npz") for task in (0, 1)],
    }


def test_workers_shard_each_global_batch_unevenly(runs):
    reports = runs["reports"]
    assert [r["replicas"] for r in reports] == [2, 2]
    assert [r["chief"] for r in reports] == [True, False]
    shards = [r["shards"] for r in reports]
    for step, (_, labels) in enumerate(global_batches()):
        # DATA sharding: worker 0 takes the first rows of the global batch.
        np.testing.assert_array_equal(np.array(shards[0][step] + shards[1][step]), labels)
        tokens = [int((np.array(s[step]) != PAD).sum()) for s in shards]
        assert tokens[0] > 3 * tokens[1], tokens
        assert [len(s[step]) for s in shards] == [4, 3]


def test_two_workers_match_one_device(runs):
    worker0, worker1 = runs["workers"]
    for a, b in zip(worker0, worker1):
        np.testing.assert_array_equal(a, b)  # the workers hold the same replicas
    moved = max(float(np.abs(a - b).max()) for a, b in zip(runs["one_device"], runs["initial"]))
    assert moved > 0.05  # 8 Adam updates with a high learning rate
    # A key projection's bias has an identically zero gradient (softmax is
    # unchanged when all scores of a query move by the same q.b), so Adam
    # (epsilon 1e-9) moves it by lr-sized steps of rounding noise that cannot
    # change any output: it differs between any two runs. Skip it.
    compared = [
        (path, one, two)
        for path, one, two in zip(runs["paths"], runs["one_device"], worker0)
        if not path.endswith("key/bias")
    ]
    assert len(compared) >= len(worker0) - 3
    # Float summation order differs (per-worker sums, then an all-reduce);
    # Adam divides by the root of the squared-gradient average, so elements
    # with tiny gradients carry that rounding up to a few 1e-5 after 8 steps
    # at a learning rate near 0.1, while the weights moved by about 0.5.
    worst = max(float(np.abs(one - two).max()) for _, one, two in compared)
    bad = [(path, float(np.abs(one - two).max())) for path, one, two in compared
           if not np.allclose(two, one, rtol=1e-5, atol=1e-4)]
    assert not bad, (worst, bad)


def test_only_the_chief_keeps_checkpoints_and_every_worker_resumes(runs):
    chief, other = runs["reports"]
    shared = str(runs["dir"] / "checkpoints")
    for name in ("first", "resumed"):
        assert chief[name]["checkpoint_dir"] == shared
        assert other[name]["checkpoint_dir"] != shared
        assert not other[name]["private_dir_left"]
        # The non-chief saved too (into its private directory), as it must.
        assert other[name]["files_at_end"] == chief[name]["files_at_end"]
    assert chief["first"]["files_at_end"] == [
        "ckpt-000000002.weights.h5", "ckpt-000000004.weights.h5", "latest.json"
    ]
    # The non-chief's private directory starts with the chief's checkpoints.
    assert other["first"]["files_at_start"] == []
    assert other["resumed"]["files_at_start"] == chief["first"]["files_at_end"]
    assert [r["first"]["start_steps"] for r in (chief, other)] == [[0], [0]]
    assert [r["resumed"]["start_steps"] for r in (chief, other)] == [[4], [4]]
    assert sorted(os.listdir(shared)) == [
        "ckpt-000000006.weights.h5", "ckpt-000000008.weights.h5", "latest.json"
    ]


def test_plain_strategy_fails_in_keras_fit(runs):
    """Why `multi_worker_strategy` exists: evidence from the same workers.

    If a Keras release fixes these, the workaround is no longer needed and
    this test says so (skip) rather than failing.
    """
    for task in (0, 1):
        plain, nests_handled = runs["reports"][task]["without_workaround"]
        if plain == "ok" and nests_handled == "ok":
            pytest.skip("Keras fit now works with a plain MultiWorkerMirroredStrategy: "
                        "the reduce override in multi_worker_strategy can go.")
        # 1. The first batch (a nest) is reduced in one call.
        assert plain == "ok" or "unsupported type (<class 'dict'>)" in plain, plain
        # 2. keras-team/keras#20585: scalar logs reduced along axis 0.
        assert nests_handled == "ok" or (
            "Invalid reduction dimension 0 for input with 0 dimensions" in nests_handled
        ), nests_handled


def tf_config(task_type="worker", index=0, jobs=("worker",)):
    cluster = {job: [f"host{n}:12345" for n in range(2)] for job in jobs}
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


@pytest.mark.parametrize(
    "value, message",
    [
        ("{not json", "TF_CONFIG is not valid JSON"),
        ('["worker"]', "TF_CONFIG must be a JSON object"),
        ('{"task": {"type": "worker", "index": 0}}', 'TF_CONFIG needs a "cluster" object'),
        ('{"cluster": {"worker": ["a:1"]}}', 'TF_CONFIG needs a "task" object'),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}', "index 1 is not in the cluster"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}', "task 'chief' index 0"),
    ],
)
def test_bad_tf_config_is_named(monkeypatch, value, message):
    from keras_transformer.training.distribute import is_chief, multi_worker_strategy

    monkeypatch.setenv("TF_CONFIG", value)
    with pytest.raises(ValueError, match=re.escape(message)):
        multi_worker_strategy()  # fails before any strategy is created
    with pytest.raises(ValueError, match=re.escape(message)):
        is_chief()


def test_chief_is_the_chief_task_else_worker_0(monkeypatch):
    from keras_transformer.training.distribute import is_chief

    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert is_chief()  # one process, no cluster
    cases = [
        (tf_config("worker", 0), True),
        (tf_config("worker", 1), False),
        (tf_config("chief", 0, jobs=("chief", "worker")), True),
        (tf_config("worker", 0, jobs=("chief", "worker")), False),
    ]
    for value, expected in cases:
        monkeypatch.setenv("TF_CONFIG", value)
        assert is_chief() is expected, value


def test_worker_checkpoint_dir_copies_the_chiefs_checkpoints(monkeypatch, tmp_path):
    from keras_transformer.training import StepCheckpoint, latest_checkpoint
    from keras_transformer.training.distribute import worker_checkpoint_dir

    shared = tmp_path / "checkpoints"
    model = build_model()
    for step in (3, 5):
        StepCheckpoint(str(shared), 1, initial_step=step).save(model)
    monkeypatch.setenv("TF_CONFIG", tf_config("worker", 0))
    with worker_checkpoint_dir(shared) as path:
        assert path == str(shared)
    monkeypatch.setenv("TF_CONFIG", tf_config("worker", 1))
    with worker_checkpoint_dir(shared) as path:
        assert path != str(shared)
        assert sorted(os.listdir(path)) == ["ckpt-000000003.weights.h5", "ckpt-000000005.weights.h5", "latest.json"]
        assert latest_checkpoint(path)[0] == 5
        restored = build_model()
        assert StepCheckpoint(path, 1).restore(restored) == 5
        for a, b in zip(restored.get_weights(), model.get_weights()):
            np.testing.assert_array_equal(a, b)
    assert not os.path.exists(path)
    with worker_checkpoint_dir(tmp_path / "empty") as path:  # nothing to resume from
        assert os.listdir(path) == []


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2])
