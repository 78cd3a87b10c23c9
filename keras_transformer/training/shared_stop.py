"""One decision to stop, taken at every step boundary by all the workers of a cluster together.

A worker that leaves the training loop while another waits in the next gradient all-reduce
hangs the cluster, or ends it with TensorFlow's "CollectiveReduceV2 ... Restart your program"
error. Each worker's callbacks decide from what they see: the time limit from the worker's own
clock, early stopping from its own validation, so two workers can decide differently at the same
step. `SharedStop`, the fit's last callback, makes the decision one: after every step each worker
adds its part to an all-reduce, and all take the result:

- the chief's decision (time limit, step limit, early stopping, a non-finite loss: whatever set
  `model.stop_training` before it on the chief) is every worker's; the others' own are ignored;
- a stop signal (SIGTERM, as a scheduler sends before it kills a job) on any worker stops all of
  them at the same step, after which the run's checkpoint of that step is written as at any
  other end of training. A second signal ends the process at once.

In one process (no cluster) only the signal part applies.
"""

import os
import signal
import threading

import keras


class SharedStop(keras.callbacks.Callback):
    """Stops every worker at the same step: on the chief's decision or any worker's signal.

    Put it last among the fit's callbacks (it reads what those before it decided).

    Args:
        strategy: the cluster's `MultiWorkerMirroredStrategy` (None: one process).
        local_replicas: this worker's replicas (each worker adds its part once).
        chief: whether this worker decides.
        signals: the signals that ask for a stop at the next step boundary.

    After the fit, `signal` is the number of the signal that stopped training (None if none did)
    and `step` the step it stopped at (as the run's `StepCheckpoint` counts, which `fit_resumable`
    sets as `checkpoint`; else the optimizer's iteration count).
    """

    checkpoint = None

    def __init__(self, strategy=None, local_replicas=1, chief=True, signals=(signal.SIGTERM,)):
        super().__init__()
        self.strategy = strategy
        self.local_replicas = int(local_replicas)
        self.chief = chief
        self.signals = tuple(signals)
        self.signal = None  # the signal that stopped training
        self.step = None
        self._received = None  # a signal received since the last step boundary
        self._previous = {}

    # -- signals -------------------------------------------------------------
    def _on_signal(self, number, frame):
        if self._received is not None:  # the second: end now
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        self._received = number
        print(f"{signal.Signals(number).name}: stopping at the end of this step (checkpoint written); "
              "send it again to end at once", flush=True)

    def on_train_begin(self, logs=None):
        if threading.current_thread() is not threading.main_thread():
            return  # Python takes signal handlers in the main thread only
        for number in self.signals:
            self._previous[number] = signal.signal(number, self._on_signal)

    def on_train_end(self, logs=None):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    # -- the decision ----------------------------------------------------------
    def on_train_batch_end(self, batch, logs=None):
        mine = [1.0 if self.chief and self.model.stop_training else 0.0, 1.0 if self._received else 0.0]
        decided, signalled = mine if self.strategy is None else self._sum_over_workers(mine)
        self.model.stop_training = bool(decided or signalled)
        if signalled and self.signal is None:
            self.signal = self._received or signal.SIGTERM  # a peer's, when this worker had none
            self.step = (self.checkpoint.step if self.checkpoint is not None
                         else int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)))

    def _sum_over_workers(self, values):
        from keras_transformer.training.distribute import sum_over_workers

        return sum_over_workers(self.strategy, self.local_replicas, values)
