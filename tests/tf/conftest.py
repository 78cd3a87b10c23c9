"""Helpers shared by the checkpoint and fault tests: a small compiled model and
checkpoint files whose every weight is a known value."""

import keras
import numpy as np
import pytest

from keras_transformer.training import StepCheckpoint


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
