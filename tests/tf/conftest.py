"""Helpers shared by the checkpoint and fault tests: a small compiled model,
checkpoint files whose every weight is a known value, and the harness that
runs a test file's training child in a subprocess (to be killed, restarted
and compared with an uninterrupted run)."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_transformer.training import StepCheckpoint

# The Transformer that recipe tests train for a few steps (no test of a recipe
# measures quality), as `--set KEY=VALUE` texts: `from conftest import
# TINY_MODEL` (pytest puts this directory's conftest under that name).
TINY_MODEL = ("model.d_model=16", "model.d_ff=32", "model.num_heads=2", "model.num_encoder_layers=1",
              "model.num_decoder_layers=1")


def write_synthetic_corpus(directory, train_pairs, valid_pairs):
    """train.jsonl and valid.jsonl of the synthetic English-German generator (seed 0) in `directory`."""
    from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl

    train, valid = make_splits(train_pairs, valid_pairs, seed=0)
    write_jsonl(directory / "train.jsonl", train)
    write_jsonl(directory / "valid.jsonl", valid)
    return directory

def _small_model(compile_it=True):
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, name="hidden"), keras.layers.Dense(2, name="out")]
    )
    if compile_it:
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    return model


def _weights_of(value, model):
    """Weights equal to `value` plus each element's index (so averaging that
    mixed up elements or variables would show)."""
    return [np.full(w.shape, value, w.dtype) + np.arange(w.size).reshape(w.shape) for w in model.get_weights()]


def _write_known_checkpoints(directory, steps=(1, 2, 3), values=None):
    """`ckpt-<step>` files whose weights are `_weights_of(value)` (value = step
    unless given), with optimizer state (iterations = 7)."""
    values = [float(step) for step in steps] if values is None else values
    model = _small_model()
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(7)
    checkpoint = StepCheckpoint(directory, save_every_steps=1)
    checkpoint.set_model(model)
    for step, value in zip(steps, values, strict=True):
        model.set_weights(_weights_of(value, model))
        checkpoint.step = step
        checkpoint.save()
    return model


@pytest.fixture
def small_model():
    """`small_model(compile_it=True)`: Dense(4) -> Dense(2) on 3 inputs, Adam, MSE."""
    return _small_model


@pytest.fixture
def weights_of():
    return _weights_of


@pytest.fixture
def write_known_checkpoints():
    return _write_known_checkpoints


def _start_child(test_file, *arguments):
    """Runs `test_file` as a script (its `if __name__ == "__main__":` child)
    with `arguments` on the TensorFlow backend; returns the `Popen`, with
    stderr merged into its stdout."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen(
        [sys.executable, os.path.abspath(test_file), *map(str, arguments)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _finish_child(process, returncode=0, timeout=240):
    """Waits for a child; fails with the end of its output unless it exited
    with `returncode` (e.g. `-signal.SIGKILL` for one that killed itself)."""
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == returncode, output[-5000:]
    return output


def _saved_weights(path):
    """The weights a child saved with `np.savez(path, *model.get_weights())`, in order."""
    arrays = np.load(path)
    return [arrays[f"arr_{i}"] for i in range(len(arrays.files))]


@pytest.fixture(scope="session")
def start_child():
    """`start_child(__file__, *arguments) -> Popen` (see `_start_child`)."""
    return _start_child


@pytest.fixture(scope="session")
def finish_child():
    """`finish_child(process, returncode=0, timeout=240) -> output`."""
    return _finish_child


@pytest.fixture(scope="session")
def saved_weights():
    """`saved_weights(path)`: the arrays of a child's `final.npz`, in order."""
    return _saved_weights
