"""One `train` command for one host or several: the cluster that TF_CONFIG names.

Every host runs the same `keras-transformer train` command with its own
TF_CONFIG (see `training.distribute.multi_worker_strategy`). Worker 0 (or
the "chief" task) is the chief:

- it prepares the data (`run.data.prepare`); the others wait for the prepared
  directory, which must be on a file system all workers read (like the
  checkpoints), for at most `training.worker_wait_minutes`, and give up at
  once when the chief records its failure (`chief-failed.json` in the
  output directory);
- its output directory is the run's: checkpoints, progress, validations,
  TensorBoard logs and the final model are written there. The other workers
  run the very same steps (saving and validating may need every worker's
  part of a collective operation) in a private directory that starts as a
  copy of the chief's run state (so that all restore the same checkpoint and
  make the same early-stopping decisions) and is deleted at the end;
- each worker reads only its own batches of every epoch (`BatchPlan`'s
  share), so the workers together see each pair once per epoch.

TensorFlow backend only.
"""

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import time


@dataclasses.dataclass
class Worker:
    """This process's place in the cluster."""

    strategy: object
    count: int
    index: int
    chief: bool

    @property
    def local_replicas(self):
        return self.strategy.num_replicas_in_sync // self.count


def join_cluster():
    """A `Worker` when TF_CONFIG names a cluster of several workers, else None.

    Call it before anything else runs a TensorFlow op: the strategy starts
    this worker's server."""
    text = os.environ.get("TF_CONFIG", "").strip()
    if not text:
        return None
    import keras

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(f"TF_CONFIG is set: training on several workers needs KERAS_BACKEND=tensorflow (the "
                           f"backend is {keras.backend.backend()!r}).")
    from keras_transformer.training.distribute import _parse_tf_config, is_chief, multi_worker_strategy

    cluster = _parse_tf_config()["cluster"]
    members = [("chief", i) for i in range(len(cluster.get("chief", [])))] + [
        ("worker", i) for i in range(len(cluster.get("worker", [])))]
    if len(members) < 2:
        return None
    task = json.loads(text)["task"]
    index = members.index((task["type"], task["index"])) if (task["type"], task["index"]) in members else None
    if index is None:
        raise RuntimeError(f"TF_CONFIG: task {task} is neither a chief nor a worker; only those train.")
    strategy = multi_worker_strategy()
    return Worker(strategy, len(members), index, is_chief(strategy))


def wait_for(check, description, timeout_s=3600, every_s=2.0, failed=lambda: None):
    """Calls `check()` until it returns without raising `ValueError`; gives up
    after `timeout_s` with the last error, or as soon as `failed()` returns a
    message (the chief's failure)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except ValueError as error:
            failure = failed()
            if failure is not None:
                raise RuntimeError(f"gave up waiting for {description}: {failure}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"waited {timeout_s:.0f}s for {description} (training.worker_wait_minutes): "
                                   f"{error}") from None
            time.sleep(every_s)


CHIEF_FAILED_FILE = "chief-failed.json"
# A failure recorded this long before a worker started still counts: the hosts'
# clocks and start times differ.
_FAILURE_GRACE_S = 300


def clear_chief_failure(output_dir):
    """The chief, starting: an earlier attempt's failure is not this one's."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(output_dir, CHIEF_FAILED_FILE))


def record_chief_failure(output_dir, error):
    """The chief, failing before training: the waiting workers read it (`chief_failure`)."""
    path = os.path.join(output_dir, CHIEF_FAILED_FILE)
    with contextlib.suppress(OSError):
        with open(f"{path}.tmp-{os.getpid()}", "w", encoding="utf-8") as handle:
            json.dump({"time": time.time(), "error": f"{type(error).__name__}: {error}"}, handle)
        os.replace(f"{path}.tmp-{os.getpid()}", path)


def chief_failure(output_dir, since):
    """The chief's failure recorded in `output_dir` after `since` (`time.time()`, less a grace), or None."""
    try:
        with open(os.path.join(output_dir, CHIEF_FAILED_FILE), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if record.get("time", 0) < since - _FAILURE_GRACE_S:
        return None
    return f"the chief failed ({os.path.join(output_dir, CHIEF_FAILED_FILE)}): {record.get('error')}"


# What a non-chief worker copies from the chief's run to start where it stands.
_RUN_STATE = ("checkpoints", "best.json", "progress.jsonl")


@contextlib.contextmanager
def run_directory(worker, output_dir):
    """The directory this worker writes its run into: `output_dir` on the
    chief; elsewhere a private copy of the chief's run state (hard links
    where possible), removed on exit."""
    if worker is None or worker.chief:
        yield str(output_dir)
        return
    private = tempfile.mkdtemp(prefix=f"keras-transformer-worker{worker.index}-")
    try:
        for name in os.listdir(output_dir) if os.path.isdir(output_dir) else ():
            source, target = os.path.join(output_dir, name), os.path.join(private, name)
            if name == "checkpoints":
                shutil.copytree(source, target, copy_function=_link_or_copy)
            elif name.startswith("best-") and name.endswith(".weights.h5"):
                _link_or_copy(source, target)
            elif name in _RUN_STATE:
                shutil.copy2(source, target)  # appended to in place: a copy, not a link
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _link_or_copy(source, target):
    try:
        os.link(source, target)  # checkpoints and weights are replaced, never rewritten in place
    except OSError:
        shutil.copy2(source, target)
