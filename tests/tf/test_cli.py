"""The command line end to end on a tiny corpus: train (and resume), evaluate,
translate, attention, average-checkpoints, and named errors.

The commands run in process, and load each run once for the module
(run_memo.py: a user's every command loads it afresh; here that would only
trace the same searches again)."""

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_transformer import cli
from required_imports import required
from run_memo import runs_loaded_once  # noqa: F401  (the fixture, used by every test below)

pytestmark = pytest.mark.usefixtures("runs_loaded_once")

ROOT = Path(__file__).resolve().parents[2]

SENTENCES = [
    ("one apple", "ein Apfel"), ("two apples", "zwei Äpfel"), ("three apples", "drei Äpfel"),
    ("one house", "ein Haus"), ("two houses", "zwei Häuser"), ("three houses", "drei Häuser"),
    ("the red car", "das rote Auto"), ("the blue car", "das blaue Auto"), ("a red house", "ein rotes Haus"),
    ("I read the book", "ich lese das Buch"), ("you read the book", "du liest das Buch"),
    ("we read the book", "wir lesen das Buch"), ("the train arrives", "der Zug kommt an"),
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("cli")
    corpus = work / "corpus.tsv"
    corpus.write_text("".join(f"{en}\t{de}\n" for en, de in SENTENCES * 4), encoding="utf-8")
    config = work / "config.yaml"
    config.write_text(
        f"""output_dir: {work / 'run'}
model: {{preset: tiny, d_model: 16, d_ff: 32, num_heads: 2, num_encoder_layers: 1, num_decoder_layers: 1}}
data: {{train: {corpus}, test: {corpus}, vocabulary_size: 60, max_length: 16}}
training: {{tokens_per_batch: 128, epochs: 2, save_every_steps: 2, keep_checkpoints: 3, average_last: 2, warmup_steps: 10}}
decoding: {{beam_size: 2, max_extra_length: 5}}
"""
    )
    assert cli.main(["train", "--config", str(config)]) == 0
    return work, config


def test_train_writes_a_complete_run(trained_run):
    work, _ = trained_run
    run = work / "run"
    for name in ("config.json", "tokenizer.model", "model.keras"):
        assert (run / name).is_file(), name
    assert list((run / "checkpoints").glob("ckpt-*.weights.h5"))
    assert any((run / "tensorboard").rglob("*"))
    assert json.loads((run / "config.json").read_text())["decoding"]["beam_size"] == 2


def test_train_again_resumes_and_does_not_retrain(trained_run, capsys):
    work, config = trained_run
    before = sorted(p.name for p in (work / "run" / "checkpoints").glob("ckpt-*"))
    assert cli.main(["train", "--config", str(config)]) == 0
    after = sorted(p.name for p in (work / "run" / "checkpoints").glob("ckpt-*"))
    assert before == after  # everything was done already: nothing new trained
    assert "reusing" in capsys.readouterr().out


def test_evaluate_translate_attention(trained_run, capsys, tmp_path):
    work, _ = trained_run
    run = str(work / "run")
    assert cli.main(["evaluate", run, "--limit", "8"]) == 0
    result = json.loads((work / "run" / "eval.json").read_text())
    assert result["sentences"] == 8 and 0.0 <= result["bleu"] <= 100.0
    assert "BLEU" in capsys.readouterr().out

    output = tmp_path / "out.txt"
    assert cli.main(["translate", run, "--text", "one apple", "--text", "", "--output", str(output),
                     "--beam-size", "1"]) == 0
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2

    png = tmp_path / "attention.png"
    assert cli.main(["attention", run, "--text", "two houses", "--target", "zwei Häuser",
                     "--output", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_attention_decodes_its_target_with_the_decoding_flags(trained_run, tmp_path, monkeypatch):
    """Without --target, `attention` decodes with the decoding flags (the run's
    own decoding is beam 2, up to 5 extra tokens, alpha 0.6) and plots the
    translation that `translate` gives with the same flags."""
    from keras_transformer.run import plots
    from keras_transformer.run import translate as run_translate

    work, _ = trained_run
    run = str(work / "run")
    options = ["--beam-size", "1", "--max-extra-length", "2", "--alpha", "0.2"]
    plotted, searched = [], []
    plot, translate_texts = plots.plot_cross_attention, run_translate.translate_texts

    def recording_plot(model, tokenizer, source_text, target_text, path, layer=-1):
        plotted.append(target_text)
        return plot(model, tokenizer, source_text, target_text, path, layer=layer)

    def recording_translate(model, tokenizer, texts, decoding, *args, **kwargs):
        searched.append(decoding)
        return translate_texts(model, tokenizer, texts, decoding, *args, **kwargs)

    monkeypatch.setattr(plots, "plot_cross_attention", recording_plot)
    output = tmp_path / "out.txt"
    assert cli.main(["translate", run, "--text", "two houses", "--output", str(output), *options]) == 0
    monkeypatch.setattr(run_translate, "translate_texts", recording_translate)
    assert cli.main(["attention", run, "--text", "two houses", "--output", str(tmp_path / "a.png"), *options]) == 0
    assert [(d["beam_size"], d["max_extra_length"], d["alpha"]) for d in searched] == [(1, 2, 0.2)]
    assert plotted == [output.read_text(encoding="utf-8").rstrip("\n")]


def tiny_run_config(tmp_path, max_steps):
    """A run of a 1+1-layer model on the test sentences, a checkpoint every step, at most `max_steps`."""
    from keras_transformer import config as config_lib

    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"{en}\t{de}\n" for en, de in SENTENCES * 4), encoding="utf-8")
    return config_lib.resolve(assignments=[
        f"output_dir={tmp_path / 'run'}", f"data.train={corpus}", "data.vocabulary_size=60", "data.max_length=16",
        "model.preset=tiny", "model.d_model=16", "model.d_ff=32", "model.num_heads=2",
        "model.num_encoder_layers=1", "model.num_decoder_layers=1", "training.tokens_per_batch=128",
        f"training.max_steps={max_steps}", "training.save_every_steps=1", "training.warmup_steps=10",
    ])


def test_train_calls_the_given_callbacks(tmp_path):
    """`run.train.train(config, callbacks=[...])`: the callback sees the run's model,
    every step, and can stop training (after 2 of at most 6 steps)."""
    import keras

    from keras_transformer.run import train as run_train

    config = tiny_run_config(tmp_path, max_steps=6)

    class StopAfterTwoSteps(keras.callbacks.Callback):
        steps = []

        def on_train_batch_end(self, batch, logs=None):
            self.steps.append(int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)))
            if len(self.steps) == 2:
                self.model.stop_training = True

    callback = StopAfterTwoSteps()
    run_train.train(config, callbacks=[callback])
    assert callback.steps == [1, 2]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*")) == [
        "ckpt-000000001.weights.h5", "ckpt-000000002.weights.h5"]


def test_a_run_resumed_at_its_max_steps_trains_no_further(tmp_path):
    """training.max_steps=3, run twice: the second run loads step 3 and stops there (it used to
    train a fourth step before the step limit looked)."""
    from keras_transformer.run import train as run_train

    config = tiny_run_config(tmp_path, max_steps=3)
    run_train.train(config)
    run_train.train(config)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*")) == [
        "ckpt-000000001.weights.h5", "ckpt-000000002.weights.h5", "ckpt-000000003.weights.h5"]


def test_average_checkpoints_command(trained_run, tmp_path):
    work, _ = trained_run
    output = tmp_path / "averaged.keras"
    assert cli.main(["average-checkpoints", str(work / "run" / "checkpoints"), "--last", "2",
                     "--output", str(output), "--run", str(work / "run")]) == 0
    assert output.is_file()


def test_errors_name_the_key_or_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  epochz: 3\n")
    assert cli.main(["train", "--config", str(bad)]) == 2
    assert "unknown key 'training.epochz'" in capsys.readouterr().err
    assert cli.main(["train", "--set", f"output_dir={tmp_path / 'r'}", "--set",
                     f"data.train={tmp_path / 'missing.tsv'}"]) == 2
    assert "missing.tsv" in capsys.readouterr().err
    assert cli.main(["evaluate", str(tmp_path / "no-run")]) == 2
    assert "no-run" in capsys.readouterr().err


def subcommands():
    """Every subcommand the parser defines (read from it, so a new one is tested too)."""
    import argparse

    actions = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(actions[0].choices)


def test_the_subcommand_list_is_read_from_the_parser():
    assert {"train", "evaluate", "translate", "score", "export", "average-checkpoints", "attention",
            "plot"} <= set(subcommands())


@pytest.mark.parametrize("command", subcommands())
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    output = capsys.readouterr().out
    assert f"usage: keras-transformer {command}" in output
    assert "--help" in output


def test_train_accepts_every_run_preset(capsys):
    """The help lists the presets from config.RUN_PRESETS, English-French included, and each resolves."""
    from keras_transformer.config import RUN_PRESETS

    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name in RUN_PRESETS:
        assert name in help_text
    assert cli.main(["train", "--preset", "wmt14-en-fr-big", "--print-config"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["model"] == dict(config["model"], preset="big", dropout=0.1)
    assert config["data"]["target_key"] == "fr" and config["data"]["vocabulary_size"] == 32000


def test_init_flags_set_the_fine_tuning_keys(capsys):
    assert cli.main(["train", "--init-from", "runs/base", "--init-optimizer", "keep", "--print-config"]) == 0
    training = json.loads(capsys.readouterr().out)["training"]
    assert (training["init_from"], training["init_optimizer"]) == ("runs/base", "keep")
    assert cli.main(["train", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["training"]["init_optimizer"] == "reset"
    with pytest.raises(SystemExit):
        cli.main(["train", "--init-optimizer", "warm"])
    assert "invalid choice: 'warm'" in capsys.readouterr().err


def test_console_script_runs():
    result = subprocess.run([sys.executable, "-m", "keras_transformer.cli", "--help"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    for command in subcommands():
        assert command in result.stdout


def test_export_command_writes_a_versioned_saved_model(trained_run, tmp_path, monkeypatch, capsys):
    from keras_transformer.export import cpu_notes, signatures

    work, _ = trained_run
    # The rule the exported graph's searches are traced with, besides the one the export info records.
    rules = record_limit_rules(monkeypatch, signatures, "greedy_search", "beam_search")
    # Flags other than the run's decoding (beam 2, limit rule "fallback", GNMT's penalty); greedy also has
    # fewer signatures to trace.
    assert cli.main(["export", str(work / "run"), "--base-dir", str(tmp_path), "--beam-size", "1",
                     "--limit-rule", "force_eos", "--length-penalty", "length"]) == 0
    assert (tmp_path / "translator" / "1" / "saved_model.pb").is_file()
    info = json.loads((tmp_path / "translator" / "1" / "assets.extra" / "keras_transformer_export.json").read_text())
    assert info["search"]["limit_rule"] == "force_eos" and info["search"]["beam_size"] == 1
    assert info["search"]["length_penalty"] == "length"
    assert rules and set(rules) == {"force_eos"}, rules
    rules.clear()
    # Made on a CPU where TensorFlow leaves oneDNN off, the export says how a server there runs it faster.
    monkeypatch.setattr(cpu_notes, "tensorflow_uses_onednn", lambda: False)
    monkeypatch.delenv(cpu_notes.ONEDNN_VARIABLE, raising=False)
    capsys.readouterr()
    assert cli.main(["export", str(work / "run"), "--base-dir", str(tmp_path)]) == 0
    assert "note: TensorFlow leaves its oneDNN kernels off on this CPU" in capsys.readouterr().out
    assert rules and set(rules) == {"fallback"}, rules
    assert (tmp_path / "translator" / "2" / "saved_model.pb").is_file()  # next version, nothing overwritten
    info = json.loads((tmp_path / "translator" / "2" / "assets.extra" / "keras_transformer_export.json").read_text())
    assert info["search"]["limit_rule"] == "fallback" and info["search"]["beam_size"] == 2  # the run's decoding
    assert info["search"]["length_penalty"] == "gnmt"
    # GNMT's penalty asked for in a CTranslate2 export: the engine cannot reproduce it; nothing is written.
    assert cli.main(["export", str(work / "run"), "--format", "ctranslate2", "--output", str(tmp_path / "ct2"),
                     "--length-penalty", "gnmt"]) == 2
    assert "cannot reproduce GNMT's penalty" in capsys.readouterr().err
    assert not (tmp_path / "ct2").exists()
    # Finer phases are the plain variant's: refused with the XLA variant or another format, before anything runs.
    for flags, message in ((["--jit-compile"], "--finer-phases is the plain variant's"),
                           (["--format", "ctranslate2"], "--finer-phases applies to --format saved_model only")):
        with pytest.raises(SystemExit, match=message):
            cli.main(["export", str(work / "run"), "--base-dir", str(tmp_path / "refused"), "--finer-phases", *flags])
    assert not (tmp_path / "refused").exists()


def test_console_script_prints_only_its_own_error(tmp_path):
    """TensorFlow's start-up INFO lines (printed before absl logging honours
    TF_CPP_MIN_LOG_LEVEL) are dropped; the error names the run directory."""
    script = Path(sys.executable).parent / "keras-transformer"
    if not script.exists():
        pytest.skip("the console script is not installed in this environment")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([str(script), "translate", str(tmp_path / "no-run"), "--text", "hi"],
                            capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"keras-transformer translate: error: {tmp_path / 'no-run' / 'model.keras'}: no trained model; "
        "run `keras-transformer train` first."
    ], result.stderr


def test_bucket_width_default_follows_xla_and_can_be_set(monkeypatch):
    from keras_transformer import config as config_lib
    from keras_transformer.run import data as run_data

    config = config_lib.defaults()
    config["data"]["max_length"] = 30
    # Without XLA (TensorFlow on this CPU-only machine): one bucket per length.
    assert not run_data._train_step_uses_xla()
    assert run_data.bucket_boundaries(config) == list(range(1, 31))
    # With XLA every shape is a compilation: the pipeline's geometric default.
    monkeypatch.setattr(run_data, "_train_step_uses_xla", lambda: True)
    assert run_data.bucket_boundaries(config) is None
    config["data"]["bucket_width"] = 8
    assert run_data.bucket_boundaries(config) == [8, 16, 24, 32]
    config["data"]["bucket_width"] = 0
    with pytest.raises(run_data.RunError, match="data.bucket_width"):
        run_data.bucket_boundaries(config)


def test_train_passes_the_run_buckets_to_the_pipeline(trained_run, tmp_path, monkeypatch):
    from keras_transformer.data import batch_plan

    _, config_path = trained_run
    seen = []
    original = batch_plan.BatchPlan.__init__

    def recording(self, lengths, boundaries, *args, **kwargs):
        seen.append(list(boundaries))
        original(self, lengths, boundaries, *args, **kwargs)

    monkeypatch.setattr(batch_plan.BatchPlan, "__init__", recording)
    overrides = [f"output_dir={tmp_path / 'run'}", "training.max_steps=1", "data.bucket_width=8"]
    assert cli.main(["train", "--config", str(config_path), *sum((["--set", o] for o in overrides), [])]) == 0
    assert seen and all(boundaries == [8, 16] for boundaries in seen)


def test_same_text_same_output_on_every_path(trained_run, tmp_path, capsys, monkeypatch):
    """The CLI, the exported SavedModel (plain variant in finer phases, and
    XLA variant) and the CTranslate2 export translate the same texts alike
    (the plain variant's default phases are held to the in-process search in
    test_export.py): texts without tokens
    give "" everywhere, and a source over data.max_length (16 tokens here) is
    truncated everywhere, and every path says which: the CLI's count on
    stderr and `truncated` in --format jsonl, `Hypothesis.truncated` and
    `last_truncated` in process, the signatures' `truncated` output, the
    CTranslate2 wrapper's `last_truncated`."""
    import tensorflow as tf

    from keras_transformer.run import trained as run_trained, translate as run_translate

    work, _ = trained_run
    run = str(work / "run")
    texts = ["one apple", "\ufeff", "\u200b", "\x01", "", " ".join(["two houses"] * 12), "three apples"]
    source = tmp_path / "source.txt"
    source.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    output = tmp_path / "out.txt"
    capsys.readouterr()
    assert cli.main(["translate", run, "--input", str(source), "--output", str(output), "--beam-size", "1"]) == 0
    cli_lines = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(cli_lines) == len(texts) and cli_lines[1:5] == ["", "", "", ""]
    assert "1 of 7 sources were longer than the run's data.max_length" in capsys.readouterr().err
    cut = [False] * 5 + [True, False]
    assert cli.main(["translate", run, "--input", str(source), "--beam-size", "1", "--format", "jsonl"]) == 0
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["translation"] for r in records] == cli_lines and [r["truncated"] for r in records] == cut
    assert "1 of 7 sources were longer than the run's data.max_length" in err

    model, tokenizer, config = run_trained.load_run(run)
    translator = run_translate.make_translator(model, tokenizer, dict(config["decoding"], beam_size=1),
                                      config["data"]["max_length"])
    with pytest.warns(UserWarning, match="1 of 7 sources"):
        hypotheses = [h[0] for h in translator.translate(texts, n_best=1)]
    assert [h.translation for h in hypotheses] == cli_lines and [h.truncated for h in hypotheses] == cut
    assert translator.last_truncated == [5]

    from keras_transformer.decoding import phases

    capacities, ladders = phases._phase_capacities, []
    monkeypatch.setattr(phases, "_phase_capacities", lambda length, bound=None, ladder=None: (
        ladders.append(ladder) or capacities(length, bound, ladder)))
    for flags in (["--finer-phases"], ["--xla"]):
        base = tmp_path / f"saved{flags[0]}"
        ladders.clear()
        assert cli.main(["export", run, "--base-dir", str(base), "--beam-size", "1", *flags]) == 0
        # The plain variant's searches traced in the finer ladder; the XLA variant's in the shipped one.
        assert ladders and set(ladders) == {phases.FINER_PHASE_CAPACITIES if flags == ["--finer-phases"] else None}
        info = json.loads((base / "translator" / "1" / "assets.extra" / "keras_transformer_export.json").read_text())
        assert info["search"]["finer_phases"] == (flags == ["--finer-phases"])
        signatures = tf.saved_model.load(str(base / "translator" / "1")).signatures
        result = signatures["serving_default"](text=tf.constant(texts))
        served = [t.decode("utf-8") for t in result["translations"].numpy()]
        assert served == cli_lines, flags
        assert result["truncated"].numpy().tolist() == cut, flags
        ids = [tokenizer.tokenize([text]).to_list()[0] for text in texts]
        width = max(len(row) for row in ids)
        by_ids = signatures["translate_ids"](source_ids=tf.constant([row + [0] * (width - len(row)) for row in ids]))
        assert by_ids["truncated"].numpy().tolist() == cut, flags
        scored = signatures["score"](source=tf.constant(texts), target=tf.constant(["ein Apfel"] * len(texts)))
        assert scored["truncated"].numpy().tolist() == cut, flags

    required("ctranslate2")  # under CI=true a missing package fails the test instead of skipping it
    from keras_transformer.export.ctranslate2 import CTranslate2Translator

    assert cli.main(["export", run, "--format", "ctranslate2", "--output", str(tmp_path / "ct2")]) == 0
    engine = CTranslate2Translator(tmp_path / "ct2", intra_threads=1)  # see test_ctranslate2.ENGINE_THREADS
    assert engine.translate(texts, beam_size=1) == cli_lines
    assert engine.last_truncated == [5]


def test_translate_n_best_scores_alignments_jsonl_prefix_sampling(trained_run, tmp_path, capsys):
    from keras_transformer.decoding import Translator
    from keras_transformer.run import trained as run_trained

    work, _ = trained_run
    run = str(work / "run")
    source = tmp_path / "source.txt"
    source.write_text("one apple\ntwo houses\n", encoding="utf-8")

    def lines(*flags):
        capsys.readouterr()
        assert cli.main(["translate", run, "--input", str(source), *flags]) == 0
        return capsys.readouterr().out.splitlines()

    model, tokenizer, config = run_trained.load_run(run)
    translator = Translator(model, tokenizer, beam_size=2, max_extra_length=5, max_source_length=16)
    expected = translator.translate(["one apple", "two houses"], n_best=2)

    n_best = [line.split(" ||| ") for line in lines("--n-best", "2")]
    assert [row[0] for row in n_best] == ["0", "0", "1", "1"]
    for row, hypothesis in zip(n_best, [h for per_text in expected for h in per_text]):
        assert row[1] == hypothesis.translation
        assert float(row[2]) == pytest.approx(hypothesis.score, abs=1e-5)
        assert float(row[3]) == pytest.approx(hypothesis.log_prob, abs=1e-5)
    assert float(n_best[0][2]) >= float(n_best[1][2])

    plain = lines()
    scored = [line.split(" ||| ") for line in lines("--scores", "--alignments")]
    assert [row[0] for row in scored] == plain
    # A non-empty translation has at least one link (an empty alignment is a failure).
    assert all(re.fullmatch(r"\d+-\d+( \d+-\d+)*", row[3]) for row in scored if row[0]), scored
    assert any(row[0] for row in scored)

    # Forced: a prefix the unforced translation does not start with, so that
    # the output can only start with it if the prefix was applied.
    unforced = [json.loads(line) for line in lines("--format", "jsonl")]
    forced_word = next(word for word in ("zwei", "drei", "das", "ich") if not unforced[0]["translation"].startswith(word))
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text(f"{forced_word}\n\n", encoding="utf-8")
    records = [json.loads(line) for line in lines("--prefix", str(prefixes), "--format", "jsonl")]
    assert records[0]["translation"].startswith(forced_word) and records[0]["source"] == "one apple"
    assert records[0]["translation"] != unforced[0]["translation"]
    assert records[1] == unforced[1]  # no prefix (an empty line): the unforced output
    assert set(records[1]) == {"index", "rank", "translation", "score", "log_prob", "truncated", "source"}

    first = lines("--search", "sampling", "--seed", "3", "--temperature", "2.0")
    assert lines("--search", "sampling", "--seed", "3", "--temperature", "2.0") == first
    greedy = lines("--beam-size", "1")
    assert lines("--search", "sampling", "--top-k", "1", "--seed", "5") == greedy

    prefixes.write_text("ein\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"--prefix .*prefixes.txt has 1 lines but .*source.txt has 2"):
        cli.main(["translate", run, "--input", str(source), "--prefix", str(prefixes)])


def record_limit_rules(monkeypatch, module, *names):
    """Wraps the searches `module` calls by these names; returns the list of the `limit_rule` each call got."""
    rules = []

    def recording(search):
        def wrapper(*args, **kwargs):
            rules.append(kwargs.get("limit_rule", "<not given>"))
            return search(*args, **kwargs)

        return wrapper

    for name in names:
        monkeypatch.setattr(module, name, recording(getattr(module, name)))
    return rules


def test_limit_rule_flag_and_config_key(trained_run, tmp_path, capsys, monkeypatch):
    """`--limit-rule`, else the run's decoding.limit_rule, is the rule the
    translate command's searches get (what each rule does is
    tests/test_limit_rule.py's)."""
    from keras_transformer import config as config_lib
    import importlib

    from keras_transformer.decoding import LIMIT_RULES

    translate_lib = importlib.import_module("keras_transformer.decoding.translate")
    assert config_lib.SCHEMA["decoding"]["limit_rule"][:2] == ("fallback", LIMIT_RULES)
    # The rule the greedy search itself is called with (--beam-size 1 below).
    rules = record_limit_rules(monkeypatch, translate_lib, "greedy_search")
    work, _ = trained_run
    run = str(work / "run")
    # The config key, through a copy of the run whose config.json sets it.
    (tmp_path / "run").mkdir()
    for name in os.listdir(run):
        if name != "config.json":
            os.symlink(os.path.join(run, name), tmp_path / "run" / name)
    config = json.loads(Path(run, "config.json").read_text())
    config["decoding"]["limit_rule"] = "finish"
    (tmp_path / "run" / "config.json").write_text(json.dumps(config))
    for target, flags, expected in ((run, [], "fallback"), (run, ["--limit-rule", "force_eos"], "force_eos"),
                                    (str(tmp_path / "run"), [], "finish")):
        rules.clear()
        assert cli.main(["translate", target, "--text", "one apple", "--beam-size", "1", *flags]) == 0
        assert rules and set(rules) == {expected}, (flags, rules)
    with pytest.raises(SystemExit):
        cli.main(["translate", run, "--text", "one apple", "--limit-rule", "eos"])
    assert "invalid choice: 'eos'" in capsys.readouterr().err


def test_score_command_and_its_errors(trained_run, tmp_path, capsys):
    from keras_transformer.decoding import Translator
    from keras_transformer.run import trained as run_trained

    work, _ = trained_run
    run = str(work / "run")
    sources, targets = tmp_path / "src.txt", tmp_path / "tgt.txt"
    sources.write_text("one apple\ntwo houses\n", encoding="utf-8")
    targets.write_text("ein Apfel\nzwei Häuser\n", encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["score", run, "--source", str(sources), "--target", str(targets), "--per-token"]) == 0
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    model, tokenizer, _ = run_trained.load_run(run)
    expected = Translator(model, tokenizer, max_source_length=16).score(
        ["one apple", "two houses"], ["ein Apfel", "zwei Häuser"], per_token=True)
    for row, result in zip(rows, expected):
        assert float(row[0]) == pytest.approx(result["log_prob"], abs=1e-5)
        assert int(row[1]) == result["tokens"]
        assert float(row[2]) == pytest.approx(result["score"], abs=1e-5)
        per_token = [float(v) for v in row[3].split()]
        assert len(per_token) == result["tokens"] and sum(per_token) == pytest.approx(float(row[0]), abs=1e-4)
    assert cli.main(["score", run, "--source", str(sources), "--target", str(targets), "--format", "jsonl"]) == 0
    assert [json.loads(line)["tokens"] for line in capsys.readouterr().out.splitlines()] == [r["tokens"] for r in expected]

    targets.write_text("ein Apfel\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"--source .*src.txt has 2 lines but --target .*tgt.txt has 1"):
        cli.main(["score", run, "--source", str(sources), "--target", str(targets)])
    targets.write_bytes(b"ein Apfel\nzwei \xff\n")
    with pytest.raises(SystemExit, match=r"--target .*tgt.txt line 2: not UTF-8"):
        cli.main(["score", run, "--source", str(sources), "--target", str(targets)])


def test_no_cuda_noise_without_a_driver():
    """Without an NVIDIA driver, TensorFlow's "failed call to cuInit" ERROR line
    is not an error (no GPU can exist) and is dropped; other output stays."""
    from keras_transformer import _startup

    if not _startup._no_nvidia_driver():
        pytest.skip("this machine has an NVIDIA driver: the line would be a real error")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
    code = ("import sys, keras_transformer, tensorflow as tf; tf.constant(1).numpy(); "
            "print('kept', file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0
    assert result.stderr.splitlines() == ["kept"], result.stderr


def test_shortlist_command_and_translate_with_it(trained_run, tmp_path, capsys):
    """`shortlist` writes a file from the training corpus; `translate --shortlist` and the SavedModel of
    `export --shortlist` give the text Translator gives with that list (a list smaller than the
    vocabulary: the shortlisted search runs)."""
    from keras_transformer.decoding.shortlist import Shortlist
    from keras_transformer.run import trained as run_trained, translate as run_translate

    work, _ = trained_run
    run = str(work / "run")
    path = tmp_path / "shortlist.txt"
    assert cli.main(["shortlist", run, "--per-source", "2", "--frequent", "3", "--output", str(path)]) == 0
    shortlist = Shortlist.load(path)
    model, tokenizer, config = run_trained.load_run(run)
    texts = ["one apple", "the red car", "we read the book"]
    translator = run_translate.make_translator(model, tokenizer, config["decoding"], config["data"]["max_length"],
                                      shortlist=shortlist)
    expected = translator.translate(texts)
    ids, count = shortlist.candidates(translator.source_ids(texts))
    assert len(ids) < model.vocabulary_size and count > 4
    # The list changes the text, so a command (or an export) that ignored it would not give `expected`.
    unlisted = run_translate.make_translator(model, tokenizer, config["decoding"], config["data"]["max_length"])
    assert unlisted.translate(texts) != expected
    output = tmp_path / "out.txt"
    arguments = ["translate", run, "--output", str(output)] + [a for t in texts for a in ("--text", t)]
    assert cli.main(arguments + ["--shortlist", str(path)]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == expected
    with pytest.raises(SystemExit, match="--shortlist .*missing.txt: no such file"):
        cli.main(arguments + ["--shortlist", str(tmp_path / "missing.txt")])
    # The SavedModel with the shortlist baked in gives the same text.
    assert cli.main(["export", run, "--base-dir", str(tmp_path / "models"), "--shortlist", str(path),
                     "--warmup-rows", "1"]) == 0
    import tensorflow as tf

    signatures = tf.saved_model.load(str(tmp_path / "models" / "translator" / "1")).signatures
    served = signatures["serving_default"](text=tf.constant(texts))["translations"].numpy()
    assert [t.decode("utf-8") for t in served] == expected
    n_best = signatures["translate_n_best"](text=tf.constant(texts))["translations"].numpy()
    for row, kept in zip(n_best, translator.translate(texts, n_best=2, distinct=False)):
        assert [t.decode("utf-8") for t in row[: len(kept)]] == [h.translation for h in kept]
    with pytest.raises(SystemExit, match="--shortlist-size .* needs --shortlist and --jit-compile"):
        cli.main(["export", run, "--shortlist", str(path), "--shortlist-size", "128"])
    with pytest.raises(SystemExit, match="--xla-min-rows is the XLA variant's smallest row bucket: it needs "
                                         "--jit-compile"):
        cli.main(["export", run, "--xla-min-rows", "1"])
    with pytest.raises(SystemExit, match="--xla-phase-buckets is the XLA variant's: it needs --jit-compile"):
        cli.main(["export", run, "--xla-phase-buckets", "2"])
