import os
from pathlib import Path

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


# Session fixtures that train a model once per test run behind a file lock
# (tests/tf/conftest.py). Two workers starting modules that take one at the
# same moment would leave one of them waiting for the other's training (half
# a minute idle in CI), so those modules make one unit of work: one worker
# trains, then runs them one after another.
SHARED_TRAINING_FIXTURES = ("easy_synthetic_run",)


def modules_sharing_a_training(root):
    """{test module path relative to `root` (the repository): fixture} for
    each module under tests/ with a function that takes one of
    SHARED_TRAINING_FIXTURES."""
    import re

    taking = re.compile(r"def \w+\([^)]*\b(" + "|".join(SHARED_TRAINING_FIXTURES) + r")\b")
    found = {}
    for path in sorted((Path(root) / "tests").rglob("test_*.py")):
        match = taking.search(path.read_text(encoding="utf-8"))
        if match:
            found[path.relative_to(root).as_posix()] = match.group(1)
    return found


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (tests/run_all.py), with the modules that share a
    trained session fixture in one unit of work."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    sharing = modules_sharing_a_training(config.rootpath)

    class SharedTrainingScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            module = super()._split_scope(nodeid)
            return sharing.get(module, module)

    return SharedTrainingScheduling(config, log)
