"""Before the first step, every worker of a cluster checks that it trains what the chief trains.

Workers that hold other prepared data, plan other batches or resume from another step would
train on, all-reducing gradients of different things (or hang when their step counts run out at
different times): a non-chief restarted without the shared disk starts at step 0 with fresh
weights while the chief resumes, a worker with another `data.prepared_dir` reads other pairs.
`WorkerAgreement` compares, at the start of every fit, each worker's facts (strings, e.g. digests)
and its start step with the chief's, over two all-reduces, and fails every worker alike, naming
what differs, so that none is left waiting in a collective.
"""

import hashlib

import keras


class WorkerMismatchError(RuntimeError):
    """The workers of a cluster do not train the same thing; the message says what differs."""


def _chunks(text):
    """Three 16-bit numbers (exact in float32) from a digest of `text`."""
    digest = hashlib.sha256(text.encode()).digest()
    return [float(int.from_bytes(digest[i:i + 2], "big")) for i in (0, 2, 4)]


def _step_chunks(step):
    return [float((step >> shift) & 0xFFFF) for shift in (32, 16, 0)]


class WorkerAgreement(keras.callbacks.Callback):
    """Fails every worker, before the first step of a fit, unless all hold the chief's facts and step.

    Args:
        strategy: the cluster's `MultiWorkerMirroredStrategy`.
        local_replicas: this worker's replicas.
        chief: whether this worker is the chief.
        index: this worker's index (for the message).
        facts: `{name: text}` that must be the same on every worker (e.g. "the prepared data":
            its digest).

    The start step is the run's `StepCheckpoint`'s (set by `fit_resumable`), else the
    optimizer's iteration count.
    """

    checkpoint = None  # fit_resumable sets the run's StepCheckpoint

    def __init__(self, strategy, local_replicas, chief, index, facts):
        super().__init__()
        self.strategy, self.local_replicas, self.chief, self.index = strategy, local_replicas, chief, index
        self.facts = dict(facts)

    def _sum(self, values):
        from keras_transformer.training.distribute import sum_over_workers

        return sum_over_workers(self.strategy, self.local_replicas, values)

    def on_train_begin(self, logs=None):
        step = (self.checkpoint.step if self.checkpoint is not None
                else int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)))
        mine = [value for text in self.facts.values() for value in _chunks(text)] + _step_chunks(step)
        # 1. Every worker learns the chief's values.
        chiefs = self._sum(mine if self.chief else [0.0] * len(mine))
        names = [*self.facts, "start step"]
        differs = [float(mine[3 * i:3 * i + 3] != chiefs[3 * i:3 * i + 3]) for i in range(len(names))]
        # 2. Every worker learns how many differ in what.
        counts = self._sum(differs)
        if not any(counts):
            return
        chief_step = int(chiefs[-3]) << 32 | int(chiefs[-2]) << 16 | int(chiefs[-1])
        what = "; ".join(
            f"{name}: {int(count)} worker(s) differ from the chief"
            + (f" (the chief starts at step {chief_step})" if name == "start step" else "")
            for name, count in zip(names, counts) if count)
        mine_differ = [name for name, flag in zip(names, differs) if flag]
        here = (f" This worker ({self.index}) differs in: {', '.join(mine_differ)}"
                + (f" (step {step} here)" if "start step" in mine_differ else "") + "." if mine_differ else "")
        raise WorkerMismatchError(
            f"the workers do not train the same run: {what}.{here} Every worker must read the chief's prepared "
            "data and checkpoints (data.prepared_dir and output_dir on a disk all hosts share) with the same "
            "configuration.")
