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


@pytest.fixture
def one_phase_search(monkeypatch):
    """Searches decode in one phase with room for the whole output buffer,
    as the shipped ladder (`phases.PHASE_CAPACITIES`, first rung 16) has
    them do at run time for buffers of at most 16 positions, which the
    searches of a module taking this fixture must keep to (a longer buffer
    fails the search). JAX and PyTorch know the buffer when tracing and
    build that one phase anyway; a TensorFlow graph, whose source width is
    unknown while tracing, would also trace the ladder's four further
    phases, which then run no step: 6-7 CPU-s per traced search instead of
    1-1.5 (tiny model, beam 2). Searches that cross phases are held to the
    same outputs in test_search.py and test_compaction.py."""
    from keras_transformer.decoding import phases

    first_rung = phases.PHASE_CAPACITIES[0]
    one_phase = phases._phase_capacities

    def checked_one_phase(buffer_length, buffer_bound=None, ladder=None):
        if isinstance(buffer_length, int):
            assert buffer_length <= first_rung, f"a {buffer_length}-position buffer would decode in phases"
        else:  # a TensorFlow graph: checked when it runs (tf.function runs every assertion it traced)
            import tensorflow as tf

            check = tf.debugging.assert_less_equal(buffer_length, first_rung,
                                                   message="the buffer would decode in phases")
            with tf.control_dependencies([check]):
                buffer_length = tf.identity(buffer_length)
        return one_phase(buffer_length, buffer_bound, ladder)

    # The compiled searches' cache key holds the ladder: none traced with the shipped one is reused.
    monkeypatch.setattr(phases, "PHASE_CAPACITIES", ())
    monkeypatch.setattr(phases, "_phase_capacities", checked_one_phase)
