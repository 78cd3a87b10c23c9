"""Training workflow: progress inside an epoch, validation BLEU with early
stopping and the best model kept across a kill, training curves as a PNG."""

import itertools
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import write_synthetic_corpus

from keras_transformer import config as config_lib
from keras_transformer.run import train as run_train
from keras_transformer.training.progress import PROGRESS_FILE, read_best, read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), 600, 40)


def small_config(corpus, output_dir, **training):
    settings = dict(max_steps=12, progress_every_steps=3, progress_every_seconds=1000.0, save_every_steps=4,
                    warmup_steps=10, validate_every_steps=4, validation_sentences=8, average_last=1)
    settings.update(training)
    assignments = [f"output_dir={output_dir}", f"data.train={corpus / 'train.jsonl'}",
                   f"data.valid={corpus / 'valid.jsonl'}", "data.vocabulary_size=300",
                   "model.d_model=32", "model.d_ff=64", "model.num_heads=2", "model.num_encoder_layers=1",
                   "model.num_decoder_layers=1", "training.tokens_per_batch=400", "decoding.max_extra_length=5"]
    assignments += [f"training.{key}={value}" for key, value in settings.items()]
    return config_lib.resolve([], None, assignments)


def test_progress_lines_records_validation_and_best_model(corpus, tmp_path, capsys):
    output_dir = run_train.train(small_config(corpus, tmp_path / "run"))
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if line.startswith("step ")]
    # A line every 3 steps inside the epoch, with every figure.
    assert [int(line.split()[1]) for line in lines][:4] == [3, 6, 9, 12]
    for field in ("epoch 1 (", "loss ", "tokens/s", "lr "):
        assert field in lines[0]
    records = read_records(os.path.join(output_dir, PROGRESS_FILE))
    progress = [r for r in records if "tokens_per_second" in r]
    assert [r["step"] for r in progress] == [3, 6, 9, 12]
    # The learning rate logged at step s is the optimizer's current rate, the
    # one its next update (s + 1) takes: the paper's schedule worked out here
    # (d_model 32, warmup 10, scale 1).
    for record in progress:
        update = record["step"] + 1
        assert record["learning_rate"] == pytest.approx(32**-0.5 * min(update**-0.5, update * 10**-1.5), rel=1e-6)
    # tokens/s: test_tokens_per_second_is_target_tokens_over_the_interval_between_reports. The
    # logged validation BLEU and chrF against sacreBLEU: test_finetune.py, on a run that
    # translates well enough for nonzero scores (this one's outputs are still empty).
    validations = [r for r in records if "valid_bleu" in r]
    assert [r["step"] for r in validations] == [4, 8, 12]
    best = read_best(output_dir)
    values = [r["valid_bleu"] for r in validations]
    assert best["step"] == validations[int(np.argmax(values))]["step"]  # the first of the best
    assert best["value"] == max(values)
    assert os.path.isfile(best["weights"])
    assert f"best validated weights (step {best['step']}" in printed
    from keras_transformer.run.plots import plot_training_curves

    png = plot_training_curves(output_dir, tmp_path / "curves.png")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_tokens_per_second_is_target_tokens_over_the_interval_between_reports(tmp_path):
    """The clock is read by callbacks just before and just after
    `TrainingProgress` at every step, so each report's interval lies between
    known bounds; the target tokens of its steps are counted here from the
    labels (pads excluded). The logged rate must lie between tokens / longest
    and tokens / shortest possible interval."""
    import time

    import keras

    from keras_transformer.training.progress import TrainingProgress
    from keras_transformer.training.metrics import TargetTokenCount

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = {}

        def on_train_begin(self, logs=None):
            self.times[0] = time.monotonic()

        def on_train_batch_end(self, batch, logs=None):
            self.times[batch + 1] = time.monotonic()

    rng = np.random.default_rng(0)
    batch, steps, length = 4, 12, 6
    labels = rng.integers(1, 10, size=(batch * steps, length)).astype("int32")
    for row, kept in enumerate(rng.integers(1, length + 1, size=batch * steps)):
        labels[row, kept:] = 0  # pads (id 0) after a random length
    inputs = rng.integers(1, 10, size=(batch * steps, length)).astype("int32")
    model = keras.Sequential([keras.Input((length,), dtype="int32"), keras.layers.Embedding(10, 8),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=[TargetTokenCount()])
    before, after = Clock(), Clock()
    progress = TrainingProgress(tmp_path, every_steps=3, every_seconds=1e9, live=False)
    model.fit(inputs, labels, batch_size=batch, epochs=1, shuffle=False, verbose=0,
              callbacks=[before, progress, after])
    records = [r for r in read_records(tmp_path / PROGRESS_FILE) if "tokens_per_second" in r]
    assert [r["step"] for r in records] == [3, 6, 9, 12]
    tokens_per_step = (labels != 0).reshape(steps, batch * length).sum(1)
    previous = 0
    for record in records:
        step = record["step"]
        tokens = tokens_per_step[previous:step].sum()
        shortest = before.times[step] - after.times[previous]
        longest = after.times[step] - before.times[previous]
        rate = record["tokens_per_second"]
        assert tokens / longest * (1 - 1e-9) <= rate <= tokens / shortest * (1 + 1e-9), (step, tokens, rate)
        previous = step


def test_tokens_per_second_across_an_epoch_end(monkeypatch):
    """Epochs of 5 steps of 100 target tokens, one (fake) second per step, a
    report every 3 steps: the report at step 6 covers steps 4-6, two at the
    end of epoch 1 and one in epoch 2, so 300 tokens in 3 s, though the token
    metric (as Keras' logs give it) restarted at step 6. Each rate is 100."""
    import io
    import types

    from keras_transformer.training import progress as progress_lib

    clock = {"now": 0.0}
    monkeypatch.setattr(progress_lib, "time", types.SimpleNamespace(monotonic=lambda: clock["now"],
                                                                     time=lambda: clock["now"]))
    progress = progress_lib.TrainingProgress(None, every_steps=3, every_seconds=1e9, live=False,
                                             stream=io.StringIO(), steps_per_epoch=5)
    progress.checkpoint = types.SimpleNamespace(step=0)  # the run's step count (_CountsRunSteps)
    progress.set_model(types.SimpleNamespace(optimizer=types.SimpleNamespace(learning_rate=0.5)))
    rates = {}
    progress.on_train_begin()
    for epoch in range(3):
        progress.on_epoch_begin(epoch)
        for batch in range(5):
            clock["now"] += 1.0
            progress.checkpoint.step += 1
            logs = {"loss": 1.0, "target_tokens": 100.0 * (batch + 1)}  # the epoch's count so far
            progress.on_train_batch_end(batch, logs)
            if "tokens_per_second" in logs:
                rates[progress.checkpoint.step] = logs["tokens_per_second"]
        progress.on_epoch_end(epoch, {})
    progress.on_train_end()
    assert rates == {step: 100.0 for step in (3, 6, 9, 12, 15)}, rates
    assert "epoch 2 (1/5)" in progress.stream.getvalue()


def test_early_stopping_stops_after_patience(corpus, tmp_path, capsys):
    # min_delta 1000 BLEU: no validation after the first counts as a gain.
    run_train.train(small_config(corpus, tmp_path / "run", max_steps=40, early_stopping_patience=2,
                            early_stopping_min_delta=1000.0))
    printed = capsys.readouterr().out
    assert "early stop: no bleu gain" in printed
    records = read_records(os.path.join(tmp_path / "run", PROGRESS_FILE))
    assert [r["step"] for r in records if "valid_bleu" in r] == [4, 8, 12]
    assert read_best(tmp_path / "run")["step"] == 4
    # Run again (as after a kill before the end): it stays stopped, trains and validates no further.
    checkpoints = sorted(os.listdir(tmp_path / "run" / "checkpoints"))
    run_train.train(small_config(corpus, tmp_path / "run", max_steps=40, early_stopping_patience=2,
                            early_stopping_min_delta=1000.0))
    assert "stopped early before" in capsys.readouterr().out
    records = read_records(os.path.join(tmp_path / "run", PROGRESS_FILE))
    assert [r["step"] for r in records if "valid_bleu" in r] == [4, 8, 12]
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == checkpoints


# A scripted metric (the crash-safety mechanics are under test, not the
# model): every validation scores one more than the last, so each is a new best.
SCRIPTED_SCORES = """
import itertools
from keras_transformer.decoding import evaluation
counter = itertools.count(START)
evaluation.corpus_scores = lambda hypotheses, references: dict.fromkeys(("bleu", "chrf"), float(next(counter)))
"""


def test_a_kill_keeps_the_best_record_and_resuming_continues_it(corpus, tmp_path, monkeypatch):
    """SIGKILL the training process right after it replaced its best model,
    then resume: the record names complete weights, and resuming continues it."""
    output_dir = tmp_path / "run"
    config = small_config(corpus, output_dir, max_steps=24, early_stopping_patience=50)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    script = SCRIPTED_SCORES.replace("START", "1") + textwrap.dedent(f"""
        import json, os, signal
        from keras_transformer.run import train as run_train
        from keras_transformer.training import progress
        original = progress.ValidationTranslation._save_best
        saves = []
        def save_then_die(self, step, *args):
            original(self, step, *args)
            saves.append(step)
            if len(saves) == 2:  # a best model replaced another
                os.kill(os.getpid(), signal.SIGKILL)
        progress.ValidationTranslation._save_best = save_then_die
        run_train.train(json.load(open({str(config_path)!r})))
    """)
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    before = read_best(output_dir)
    assert before["step"] > 4 and os.path.isfile(before["weights"])
    weights = [name for name in os.listdir(output_dir) if name.endswith(".weights.h5")]
    assert weights == [os.path.basename(before["weights"])]  # the replaced best is gone, no temporary left
    assert (before["step"], before["value"]) == (8, 2.0)
    counter = itertools.count(3)
    monkeypatch.setattr("keras_transformer.decoding.evaluation.corpus_scores",
                        lambda hypotheses, references: dict.fromkeys(("bleu", "chrf"), float(next(counter))))
    run_train.train(config)
    after = read_best(output_dir)
    assert (after["step"], after["value"]) == (24, 6.0)  # validations at 12, 16, 20, 24 scored 3..6
    validations = [r["step"] for r in read_records(os.path.join(output_dir, PROGRESS_FILE)) if "valid_bleu" in r]
    assert validations == [4, 8, 12, 16, 20, 24]


def test_training_under_mixed_precision_puts_the_callers_policy_back(corpus, tmp_path):
    # recipes/opus_mt/trip.py imported a model right after a native run in the
    # same process and got a bfloat16 one: train left its policy set.
    import keras

    assert keras.config.dtype_policy().name == "float32"
    output_dir = run_train.train(small_config(corpus, tmp_path / "run", max_steps=2, validate_every_steps=100,
                                              mixed_precision="mixed_bfloat16"))
    assert keras.config.dtype_policy().name == "float32"
    saved = json.load(open(os.path.join(output_dir, "config.json")))
    assert saved["training"]["mixed_precision"] == "mixed_bfloat16"


def test_a_run_trained_in_mixed_precision_decodes_in_float32_as_its_exports_do(corpus, tmp_path):
    """The run saves its model under the training policy (float32 weights, bfloat16 products); loaded to
    translate or export, it computes in float32, so that the package's search gives the texts CTranslate2
    float32 (an engine we did not write) gives on the run's converted weights. (This small model's greedy
    texts happen to survive bfloat16 products; a base model's do not: on the real-text benchmark's validation
    split its length ratio was 1.313 decoded in bfloat16 and 1.420 in float32, benchmarks/README.md.)"""
    import keras
    from required_imports import required

    from keras_transformer.decoding import Translator
    from keras_transformer.export.ctranslate2 import CTranslate2Translator
    from keras_transformer.run import trained
    from keras_transformer.run.data import read_pairs

    required("ctranslate2")
    output_dir = run_train.train(small_config(corpus, tmp_path / "run", max_steps=40, validate_every_steps=100,
                                              mixed_precision="mixed_bfloat16"))
    model, tokenizer, config = trained.load_run(output_dir)
    assert keras.saving.load_model(os.path.join(output_dir, "model.keras")).dtype_policy.name == "mixed_bfloat16"
    assert model.dtype_policy.name == "float32" and keras.config.dtype_policy().name == "float32"
    texts = [source for source, _ in read_pairs(config, "valid")]
    ours = Translator(model, tokenizer, beam_size=1, max_extra_length=5, limit_rule="finish").translate(texts)
    engine = CTranslate2Translator(trained.export_ctranslate2(output_dir, tmp_path / "ct2"), intra_threads=1)
    assert engine.translate(texts, beam_size=1) == ours
