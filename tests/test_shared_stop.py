"""`SharedStop` in one process: a SIGTERM stops training at the end of the step it came in,
and the handlers in place before the fit are back after it. (The cluster part, where the chief's
decision is every worker's, is tested with two workers in tests/tf/test_cluster_stop.py.)"""

import os
import signal

import keras
import numpy as np

from keras_transformer.training.shared_stop import SharedStop


def _fit(callbacks):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((40, 3), "float32"), np.ones((40, 1), "float32")
    model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=callbacks)
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class _SignalAt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_sigterm_stops_training_at_the_end_of_its_step():
    before = signal.getsignal(signal.SIGTERM)
    stop = SharedStop()
    assert _fit([_SignalAt(13), stop]) == 13  # in the second epoch: no further epoch starts either
    assert (stop.signal, stop.step) == (signal.SIGTERM, 13)
    assert signal.getsignal(signal.SIGTERM) is before


def test_without_a_signal_training_runs_to_its_end():
    stop = SharedStop()
    assert _fit([stop]) == 30
    assert stop.signal is None
