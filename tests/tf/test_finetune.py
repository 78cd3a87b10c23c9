"""Fine-tuning a trained run on a second domain (`train --init-from`).

The trained run is tests/tf/conftest.py's easy_synthetic_run (noun phrases,
modal verbs, perfect tense, times; 800 steps, trained once per test run and
shared with test_ctranslate2 and test_quantize*); the second domain is
numbers and dates, which it never saw.
"""

import json
import re
import shutil

import h5py
import keras
import numpy as np
import pytest

from keras_transformer import cli
from keras_transformer import config as config_lib
from keras_transformer.data import SubwordTokenizer
from keras_transformer.run import data as run_data
from keras_transformer.run import train as run_train
from keras_transformer.run import trained as run_trained
from keras_transformer.run import translate as run_translate
from keras_transformer.training import NoamSchedule
from keras_transformer.training.progress import PROGRESS_FILE, read_best, read_records
from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl

# easy_synthetic_run's model and vocabulary: a run initialised from it has the same.
MODEL = "{preset: tiny, d_model: 64, d_ff: 256, num_heads: 4, num_encoder_layers: 2, num_decoder_layers: 2}"
VOCABULARY_SIZE = 400
DECODING = {"beam_size": 1, "max_extra_length": 10}


VALIDATION_SENTENCES = 20


def write_config(path, output_dir, train, test, steps, warmup=150, valid=None, validate_every=None):
    """A run's config; with `valid`, it validates (BLEU/chrF) every `validate_every` steps on its first
    20 sentences, and its model.keras stays the last weights (not the best validated ones)."""
    validation = (f", validate_every_steps: {validate_every}, validation_sentences: {VALIDATION_SENTENCES}, "
                  "final_model: average" if valid else "")
    path.write_text(
        f"""output_dir: {output_dir}
model: {MODEL}
data: {{train: {train}, test: {test}, {f"valid: {valid}, " if valid else ""}source_key: en, target_key: de,
       vocabulary_size: {VOCABULARY_SIZE}, max_length: 48}}
training: {{tokens_per_batch: 2048, epochs: 50, max_steps: {steps}, warmup_steps: {warmup},
           save_every_steps: 1000, average_last: 1{validation}}}
decoding: {{beam_size: {DECODING["beam_size"]}, max_extra_length: {DECODING["max_extra_length"]}}}
"""
    )
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Domain B's (numbers, dates) train and test files."""
    work = tmp_path_factory.mktemp("finetune")
    train, test = make_splits(3000, 60, seed=2, categories=("numbers", "dates"))
    write_jsonl(work / "b-train.jsonl.gz", train)
    write_jsonl(work / "b-test.jsonl.gz", test)
    return work


@pytest.fixture(scope="module")
def domains(corpora, easy_synthetic_run):
    """(domain B's directory, the trained run of the first domain: read it, write nothing into it)."""
    return corpora, easy_synthetic_run[0]


_BLEU_ON_B = {}


def bleu_on_b(work, run):
    """BLEU of a run's model.keras on domain B's test file, decoded as DECODING (the fine-tuned runs'
    own); each run's once a module. The result goes to `work`, not into the run."""
    if run not in _BLEU_ON_B:
        result, _ = run_trained.evaluate(run, corpus=str(work / "b-test.jsonl.gz"), progress=False, decoding=DECODING,
                                  result_path=work / f"eval-{run.name}.json")
        _BLEU_ON_B[run] = result["bleu"]
    return _BLEU_ON_B[run]


# 100 steps leave both margins wide (measured: BLEU 49.4 fine-tuned, 1.4 from
# scratch, 13.1 before; 250 steps, at 67.6 / 5.6, cost 150 steps more per run).
B_STEPS, B_WARMUP = 100, 50
B_VALIDATE_EVERY = 50
# How far the fine-tuned run must stay ahead of the from-scratch control (BLEU).
SCRATCH_MARGIN = 10.0


@pytest.fixture(scope="module")
def fine_tuned(domains):
    """The first domain's run fine-tuned on domain B for 100 steps (run-b),
    validated at steps 50 and 100 on B's first 20 test sentences."""
    work, source = domains
    config = write_config(work / "b.yaml", work / "run-b", work / "b-train.jsonl.gz", work / "b-test.jsonl.gz",
                          B_STEPS, warmup=B_WARMUP, valid=work / "b-test.jsonl.gz", validate_every=B_VALIDATE_EVERY)
    assert cli.main(["train", "--config", str(config), "--init-from", str(source)]) == 0
    return work / "run-b"


@pytest.fixture(scope="module")
def from_scratch(corpora):
    """The control: the same 100 steps and schedule on domain B from a fresh
    model (and B's own tokenizer), as one would train without the first run."""
    work = corpora
    config = write_config(work / "b-scratch.yaml", work / "run-b-scratch", work / "b-train.jsonl.gz",
                          work / "b-test.jsonl.gz", B_STEPS, warmup=B_WARMUP)
    assert cli.main(["train", "--config", str(config)]) == 0
    return work / "run-b-scratch"


def test_fine_tuning_on_a_second_domain_raises_its_bleu(domains, fine_tuned):
    work, source = domains
    before = bleu_on_b(work, source)
    # The first run's tokenizer came along, byte for byte.
    assert (fine_tuned / "tokenizer.model").read_bytes() == (source / "tokenizer.model").read_bytes()
    assert json.loads((fine_tuned / "config.json").read_text())["training"]["init_from"] == str(source)
    after = bleu_on_b(work, fine_tuned)
    print(f"domain B BLEU: {before:.1f} before fine-tuning, {after:.1f} after")
    assert after > before + 10


def test_fine_tuning_beats_the_same_steps_from_scratch(domains, fine_tuned, from_scratch):
    """The control for the gain above: 100 steps on B alone, from a fresh model."""
    work, _ = domains
    after, scratch = bleu_on_b(work, fine_tuned), bleu_on_b(work, from_scratch)
    print(f"domain B BLEU after {B_STEPS} steps: {after:.1f} fine-tuned from the first run, {scratch:.1f} from scratch")
    assert after > scratch + SCRATCH_MARGIN


def test_logged_validation_scores_are_sacrebleus_on_the_same_sentences_and_outputs(domains, fine_tuned):
    """run-b validated at steps 50 and 100. Its best validated weights
    retranslate the validation subset (B's first 20 test sentences) with the
    validation decoding, and sacreBLEU scores them here: the logged BLEU and
    chrF of that step must be those scores."""
    import gzip

    import sacrebleu

    work, _ = domains
    run = fine_tuned
    best = read_best(run)
    validations = {r["step"]: r for r in read_records(run / PROGRESS_FILE) if "valid_bleu" in r}
    assert sorted(validations) == [B_VALIDATE_EVERY, B_STEPS] and best["step"] in validations
    model, tokenizer, config = run_trained.load_run(run)
    model.load_weights(best["weights"])
    with gzip.open(work / "b-test.jsonl.gz", "rt", encoding="utf-8") as stream:
        records = [json.loads(line) for line in stream][:VALIDATION_SENTENCES]
    sources, references = [r["en"].strip() for r in records], [r["de"].strip() for r in records]
    decoding = dict(config["decoding"], beam_size=config["training"]["validation_beam_size"])
    outputs = run_translate.translate_texts(model, tokenizer, sources, decoding,
                                            max_source_length=config["data"]["max_length"])
    bleu = sacrebleu.corpus_bleu(outputs, [references]).score
    chrf = sacrebleu.corpus_chrf(outputs, [references]).score
    print(f"step {best['step']}: BLEU {bleu:.2f}, chrF {chrf:.2f}; logged {validations}")
    assert bleu > 1 and chrf > 1  # a comparison of zeros would prove nothing
    logged = validations[best["step"]]
    assert logged["valid_bleu"] == pytest.approx(bleu, abs=1e-9)
    assert logged["valid_chrf"] == pytest.approx(chrf, abs=1e-9)
    assert (best["bleu"], best["chrf"]) == (logged["valid_bleu"], logged["valid_chrf"])


def test_init_from_refuses_a_different_tokenizer_or_model(domains, tmp_path):
    work, source = domains
    # The run directory already has another tokenizer: both files are named.
    config = write_config(tmp_path / "c.yaml", tmp_path / "run-c", work / "b-train.jsonl.gz",
                          work / "b-test.jsonl.gz", 2)
    (tmp_path / "run-c").mkdir()
    SubwordTokenizer.train(["ein Apfel", "two apples", "drei Häuser"], vocabulary_size=30,
                           hard_vocab_limit=False).save(str(tmp_path / "run-c" / "tokenizer.model"))
    with pytest.raises(run_data.RunError, match=r"tokenizer mismatch: .*run-c/tokenizer.model differs from "
                                            + re.escape(str(source / "tokenizer.model"))):
        run_train.train(config_lib.resolve([config], assignments=[f"training.init_from={source}"]))
    # Another architecture: the differing keys are named.
    config = write_config(tmp_path / "d.yaml", tmp_path / "run-d", work / "b-train.jsonl.gz",
                          work / "b-test.jsonl.gz", 2)
    with pytest.raises(run_data.RunError, match=r"d_model 32 here, 64 in .*model.keras"):
        run_train.train(config_lib.resolve(
            [config], assignments=[f"training.init_from={source}", "model.d_model=32"]))
    with pytest.raises(run_data.RunError, match="no model at"):
        run_train.train(config_lib.resolve([config], assignments=[f"training.init_from={tmp_path}"]))


# -- training.init_optimizer ------------------------------------------------------
# The first domain's run is the source: its only checkpoint, ckpt-800 (written
# at its last step), holds Adam's moments and iterations 800. (A 6-step run of
# its own cost this module a minute or more of tracing and training.)
SOURCE_STEPS, WARMUP = 800, 150


@pytest.fixture(scope="module")
def short_run(domains):
    """The first domain's run, as the source run of the init_optimizer tests (read only)."""
    _, run = domains
    assert sorted(p.name for p in (run / "checkpoints").glob("ckpt-*")) == [f"ckpt-{SOURCE_STEPS:09d}.weights.h5"]
    return run


class OptimizerAtStart(keras.callbacks.Callback):
    """The optimizer's variables, iteration count and learning rate before the first step of a run."""

    variables = None

    def on_train_begin(self, logs=None):
        if self.variables is None:  # a resumed epoch makes two fits
            optimizer = self.model.optimizer
            self.variables = [np.array(keras.ops.convert_to_numpy(v)) for v in optimizer.variables]
            self.iterations = int(keras.ops.convert_to_numpy(optimizer.iterations))
            self.learning_rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
            self.weights = self.model.get_weights()


def fine_tune(work, source, output_dir, steps, *settings):
    config = write_config(work / f"{output_dir.name}.yaml", output_dir, work / "b-train.jsonl.gz",
                          work / "b-test.jsonl.gz", steps, warmup=WARMUP)
    start = OptimizerAtStart()
    run_train.train(config_lib.resolve([config], assignments=[
        f"training.init_from={source}", "training.progress_every_steps=1", "training.save_every_steps=1",
        *settings]), callbacks=[start])
    return start


def logged_learning_rates(output_dir):
    return {r["step"]: r["learning_rate"] for r in read_records(output_dir / PROGRESS_FILE)
            if "learning_rate" in r}


def test_init_optimizer_keep_continues_the_source_state_and_schedule(corpora, short_run, tmp_path):
    schedule = NoamSchedule(64, warmup_steps=WARMUP)

    def rate(iterations):  # the rate Keras applies at the update that follows `iterations` updates
        return float(keras.ops.convert_to_numpy(schedule(iterations)))

    # A source whose model.keras differs from its checkpoint (as an average would).
    source = tmp_path / "source"
    shutil.copytree(short_run, source)
    model = keras.saving.load_model(str(source / "model.keras"))
    model.set_weights([w * 0.5 for w in model.get_weights()])
    model.save(str(source / "model.keras"))
    output_dir = tmp_path / "keep"
    start = fine_tune(corpora, source, output_dir, 2, "training.init_optimizer=keep")
    for actual, expected in zip(start.weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(actual, expected)
    # Adam's state is the source checkpoint's, read from the file itself.
    with h5py.File(short_run / "checkpoints" / f"ckpt-{SOURCE_STEPS:09d}.weights.h5", "r") as handle:
        saved = [handle[f"optimizer/vars/{index}"][()] for index in range(len(handle["optimizer/vars"]))]
    assert len(saved) == len(start.variables) > 2
    for actual, expected in zip(start.variables, saved):
        np.testing.assert_array_equal(actual, expected)
    assert start.iterations == SOURCE_STEPS
    assert sum(float(np.abs(v).sum()) for v in start.variables[1:]) > 0  # moments, not zeros
    # The first update uses the schedule's rate at the source's step; the
    # run's own steps (progress, checkpoints, max_steps) count from 1.
    assert start.learning_rate == pytest.approx(rate(SOURCE_STEPS), rel=1e-6)
    rates = logged_learning_rates(output_dir)
    assert sorted(rates) == [1, 2]
    for step, logged in rates.items():
        assert logged == pytest.approx(rate(SOURCE_STEPS + step), rel=1e-6)
    checkpoints = sorted(p.name for p in (output_dir / "checkpoints").glob("ckpt-*"))
    assert checkpoints == ["ckpt-000000001.weights.h5", "ckpt-000000002.weights.h5"]
    # Rerun with more steps: it resumes from its own checkpoint, not from the source's state.
    resumed = fine_tune(corpora, source, output_dir, 4, "training.init_optimizer=keep")
    assert resumed.iterations == SOURCE_STEPS + 2
    rates = logged_learning_rates(output_dir)
    assert sorted(rates) == [1, 2, 3, 4]
    assert rates[4] == pytest.approx(rate(SOURCE_STEPS + 4), rel=1e-6)


def test_init_optimizer_reset_starts_at_iteration_zero(corpora, short_run, tmp_path):
    start = fine_tune(corpora, short_run, tmp_path / "reset", 1)
    assert start.iterations == 0
    assert all(not np.any(v) for v in start.variables)
    assert logged_learning_rates(tmp_path / "reset")[1] == pytest.approx(
        float(keras.ops.convert_to_numpy(NoamSchedule(64, warmup_steps=WARMUP)(1))), rel=1e-6)


def test_init_optimizer_keep_errors_name_the_path(corpora, short_run, tmp_path):
    model_file = short_run / "model.keras"
    with pytest.raises(run_data.RunError, match=f"init_from {model_file} is a model file"):
        fine_tune(corpora, model_file, tmp_path / "from-file", 1, "training.init_optimizer=keep")
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("model.keras", "tokenizer.model"):
        shutil.copy(short_run / name, bare / name)
    with pytest.raises(run_data.RunError, match=f"{bare / 'checkpoints'} holds no checkpoint"):
        fine_tune(corpora, bare, tmp_path / "from-bare", 1, "training.init_optimizer=keep")
    # Gradient accumulation adds optimizer variables the source has not got.
    with pytest.raises(run_data.RunError,
                       match=rf"optimizer state in .*ckpt-{SOURCE_STEPS:09d}.weights.h5 does not fit"):
        fine_tune(corpora, short_run, tmp_path / "accumulating", 1, "training.init_optimizer=keep",
                  "training.gradient_accumulation_steps=2")


def test_init_from_names_the_marian_options_that_differ(tmp_path):
    """A fine-tuning run's model must have the initial model's output bias,
    sinusoid layout and layer-norm epsilon (an imported Marian model's), or
    the error names each key and both values."""
    import keras_transformer as kt

    sizes = dict(vocabulary_size=20, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=1)
    initial = kt.Transformer(output_bias=True, sinusoid_layout="concatenated", layer_norm_epsilon=1e-5, **sizes)
    initial.build()
    initial.save(tmp_path / "model.keras")
    model = kt.Transformer(**sizes)
    model.build()
    with pytest.raises(run_data.RunError) as error:
        run_train._load_initial_weights(model, tmp_path / "model.keras")
    for key in ("layer_norm_epsilon 1e-06 here, 1e-05", "output_bias False here, True",
                "sinusoid_layout 'interleaved' here, 'concatenated'"):
        assert key in str(error.value)
