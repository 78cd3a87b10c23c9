"""SIGKILL during a run's validation translation, and between writing the best
weights and `best.json`: the resumed run ends with the validations, best
record and best weights of an uninterrupted run, and no orphan file.

A tiny Transformer trains 16 steps (`run.train.train`), checkpoints every 8 and
validates every 4 in subprocesses (tests/tf/conftest.py's harness) that kill
themselves at a chosen point. The validation metric is scripted per step (the
crash-safety mechanics are under test, not the model): 1, 3, 2, 4 at steps
4, 8, 12, 16, so steps 4, 8 and 16 make new best models and 12 does not.
"""

import json
import os
import signal
import sys

import h5py
import numpy as np
import pytest
from conftest import write_synthetic_corpus

from keras_transformer.training.progress import BEST_RECORD_FILE, PROGRESS_FILE, read_best, read_records

SCORES = {4: 1.0, 8: 3.0, 12: 2.0, 16: 4.0}


def child(corpus_dir, output_dir, kill_at):
    """Trains (or resumes) the run; kills itself at `kill_at`: "translate:S"
    (half-way through the validation translation of step S), "best:S"
    (step S's best weights written, best.json not yet), or "none"."""
    import tensorflow as tf

    from keras_transformer import config as config_lib
    from keras_transformer.decoding import evaluation
    from keras_transformer.run import train as run_train
    from keras_transformer.training import progress

    tf.config.experimental.enable_op_determinism()
    kind, _, where = kill_at.partition(":")
    where = int(where or 0)
    validating = {}

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    original_validate = progress.ValidationTranslation.validate_if_due

    def maybe_validate(self, logs=None):
        validating["step"] = self._run_step()
        original_validate(self, logs)

    progress.ValidationTranslation.validate_if_due = maybe_validate
    evaluation.corpus_scores = lambda hypotheses, references: dict.fromkeys(
        ("bleu", "chrf"), SCORES[validating["step"]])
    translate_texts = run_train.translate_texts

    def translate_then_die(model, tokenizer, texts, *args, **kwargs):
        if kind == "translate" and validating["step"] == where:
            translate_texts(model, tokenizer, texts[: len(texts) // 2], *args, **kwargs)
            die()
        return translate_texts(model, tokenizer, texts, *args, **kwargs)

    run_train.translate_texts = translate_then_die
    write_record = progress.ValidationTranslation._write_record

    def write_record_unless_dying(self, **record):
        if kind == "best" and record.get("weights") == f"best-{where}.weights.h5":
            die()
        write_record(self, **record)

    progress.ValidationTranslation._write_record = write_record_unless_dying
    assignments = [
        f"output_dir={output_dir}", f"data.train={os.path.join(corpus_dir, 'train.jsonl')}",
        f"data.valid={os.path.join(corpus_dir, 'valid.jsonl')}", "data.vocabulary_size=300",
        "model.d_model=32", "model.d_ff=64", "model.num_heads=2", "model.num_encoder_layers=1",
        "model.num_decoder_layers=1", "training.tokens_per_batch=400", "training.max_steps=16",
        "training.save_every_steps=8", "training.validate_every_steps=4", "training.validation_sentences=6",
        "training.progress_every_steps=4", "training.warmup_steps=10", "training.average_last=1",
        "decoding.beam_size=1", "decoding.max_extra_length=4",
    ]
    run_train.train(config_lib.resolve([], None, assignments))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), 300, 20)


@pytest.fixture(scope="module")
def run_child(corpus, start_child, finish_child):
    """`run_child(output_dir, kill_at)`: runs the child to its end ("none") or to its SIGKILL."""

    def run(output_dir, kill_at):
        return finish_child(start_child(__file__, corpus, output_dir, kill_at),
                            0 if kill_at == "none" else -signal.SIGKILL)

    return run


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus, start_child, finish_child):
    """The uninterrupted run, started at once and awaited on first use."""
    output_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    process = start_child(__file__, corpus, output_dir, "none")

    def wait():
        if process.returncode is None:
            finish_child(process)
        return output_dir

    yield wait
    if process.poll() is None:
        process.kill()
        process.communicate()


def validations(output_dir):
    """(step, BLEU) of every validation in progress.jsonl, in order."""
    return [(r["step"], r["valid_bleu"]) for r in read_records(output_dir / PROGRESS_FILE) if "valid_bleu" in r]


def best_files(output_dir):
    return sorted(name for name in os.listdir(output_dir) if name.startswith("best"))


def weights_in(path):
    arrays = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda name, item: arrays.update({name: item[()]})
                          if isinstance(item, h5py.Dataset) else None)
    return arrays


def assert_like_the_reference(output_dir, reference_dir):
    assert validations(output_dir) == validations(reference_dir) == [(4, 1.0), (8, 3.0), (12, 2.0), (16, 4.0)]
    best, expected = read_best(output_dir), read_best(reference_dir)
    assert (best["step"], best["value"], best["validations_since_best"]) == (16, 4.0, 0)
    assert {k: v for k, v in best.items() if k not in ("weights", "last_validation")} == {
        k: v for k, v in expected.items() if k not in ("weights", "last_validation")}
    assert best_files(output_dir) == best_files(reference_dir) == ["best-16.weights.h5", BEST_RECORD_FILE]
    # The best weights are the uninterrupted run's: the resumed steps lost nothing.
    actual, wanted = weights_in(best["weights"]), weights_in(expected["weights"])
    assert sorted(actual) == sorted(wanted)
    for name in wanted:
        np.testing.assert_allclose(actual[name], wanted[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_sigkill_during_a_validation_translation(tmp_path, reference, run_child):
    output_dir = tmp_path / "run"
    # Killed translating step 8's validation; checkpoint 8 was written just
    # before it, so the resumed run starts after step 8: it must still run
    # that validation (at once), not skip it.
    run_child(output_dir, "translate:8")
    assert validations(output_dir) == [(4, 1.0)]
    assert read_best(output_dir)["step"] == 4
    # Killed translating step 12's validation (no checkpoint at 12: steps
    # 9-12 run again), then to the end.
    run_child(output_dir, "translate:12")
    assert validations(output_dir) == [(4, 1.0), (8, 3.0)]
    run_child(output_dir, "none")
    assert_like_the_reference(output_dir, reference())


def test_sigkill_between_the_best_weights_and_best_json(tmp_path, reference, run_child):
    output_dir = tmp_path / "run"
    # Step 8's best weights are on disk, best.json still names step 4's: those stay the best.
    run_child(output_dir, "best:8")
    assert best_files(output_dir) == ["best-4.weights.h5", "best-8.weights.h5", BEST_RECORD_FILE]
    assert read_best(output_dir)["step"] == 4
    assert json.loads((output_dir / BEST_RECORD_FILE).read_text())["weights"] == "best-4.weights.h5"
    # Resumed: the orphan goes, step 8 is validated again (a new best), and
    # the kill comes at the last step's best model, after its checkpoint.
    run_child(output_dir, "best:16")
    assert best_files(output_dir) == ["best-16.weights.h5", "best-8.weights.h5", BEST_RECORD_FILE]
    assert read_best(output_dir)["step"] == 8
    assert validations(output_dir) == [(4, 1.0), (8, 3.0), (12, 2.0)]
    # Resumed at max_steps: nothing to train, but step 16's validation is still due.
    output = run_child(output_dir, "none")
    assert "validation at step 16" in output
    assert_like_the_reference(output_dir, reference())


if __name__ == "__main__":
    child(*sys.argv[1:])
