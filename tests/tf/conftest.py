"""Helpers shared by the checkpoint and fault tests: a small compiled model,
checkpoint files whose every weight is a known value, and the harness that
runs a test file's training child in a subprocess (to be killed, restarted
and compared with an uninterrupted run)."""

import fcntl
import os
import shutil
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


# The synthetic corpus's simpler categories, which a short run learns (BLEU > 20).
EASY_CATEGORIES = ("noun_phrases", "modal_verbs", "perfect_tense", "times")
EASY_RUN_CONFIG = """output_dir: {work}/run
model: {{preset: tiny, d_model: 64, d_ff: 256, num_heads: 4, num_encoder_layers: 2, num_decoder_layers: 2}}
data: {{train: {work}/train.jsonl.gz, test: {work}/test.jsonl.gz, source_key: en, target_key: de,
        vocabulary_size: 400, max_length: 48}}
training: {{tokens_per_batch: 2048, epochs: 30, max_steps: 800, warmup_steps: 200,
           learning_rate_scale: 1.0, save_every_steps: 1000, average_last: 1}}
decoding: {{beam_size: 4, alpha: 0.6, max_extra_length: 8}}
"""


@pytest.fixture(scope="session")
def easy_synthetic_run(tmp_path_factory):
    """(run directory, 120 held-out pairs): a small model (d_model 64, 2+2
    layers, 400 subwords, inputs up to 48 tokens; decoding beam 4, alpha
    0.6, 8 extra tokens) trained for 800 steps (minutes) on 6,000 pairs of
    the easy categories (seed 5), for the tests that need a model that
    translates (test_ctranslate2, test_quantize*, test_finetune); load it with
    `run.trained.load_run`, and write nothing into it.

    Trained once per test run: pytest-xdist workers share the directory
    above their own temporary ones, so the first worker to need the run
    trains it under a file lock, and the others wait for it and load it."""
    from keras_transformer import cli
    from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this run's, shared by its workers
    work = base / "easy-synthetic-run"
    # The held-out pairs are drawn first: their first 80 are make_splits(6000, 80, ...)'s.
    train, test = make_splits(6000, 120, seed=5, categories=EASY_CATEGORIES)
    with open(base / "easy-synthetic-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (work / "trained").exists():
            shutil.rmtree(work, ignore_errors=True)  # a worker that failed half-way
            work.mkdir()
            write_jsonl(work / "train.jsonl.gz", train)
            write_jsonl(work / "test.jsonl.gz", test)
            (work / "config.yaml").write_text(EASY_RUN_CONFIG.format(work=work))
            assert cli.main(["train", "--config", str(work / "config.yaml")]) == 0
            (work / "trained").touch()
    return work / "run", test


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


@pytest.fixture(scope="session")
def easy_synthetic_model(easy_synthetic_run):
    """`run.trained.load_run` of easy_synthetic_run, loaded once per worker: (model,
    tokenizer, config). Do not change the model. Its modules (test_ctranslate2,
    test_quantize*) share one model object, so a search they run with the
    same options on it is traced once (keras_transformer.decoding.compiled
    keeps one per model and options), not once per module."""
    from keras_transformer.run import trained as run_trained

    return run_trained.load_run(easy_synthetic_run[0])
