import os

import keras
import numpy as np
import pytest

# Quieter TensorFlow logs when the tensorflow backend (or tf.data) is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(autouse=True)
def _seed_and_policy():
    keras.utils.set_random_seed(1234)
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)
