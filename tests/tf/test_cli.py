"""The command line end to end on a tiny corpus: train (and resume), evaluate,
translate, attention, average-checkpoints, and named errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_transformer import cli

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


@pytest.mark.parametrize("command", ["train", "evaluate", "translate", "export", "average-checkpoints", "attention"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: keras-transformer {command}" in capsys.readouterr().out


def test_console_script_runs():
    result = subprocess.run([sys.executable, "-m", "keras_transformer.cli", "--help"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    for command in ("train", "evaluate", "translate", "export", "average-checkpoints", "attention"):
        assert command in result.stdout


def test_export_command_writes_a_versioned_saved_model(trained_run, tmp_path):
    work, _ = trained_run
    assert cli.main(["export", str(work / "run"), "--base-dir", str(tmp_path), "--beam-size", "2"]) == 0
    assert (tmp_path / "translator" / "1" / "saved_model.pb").is_file()
    assert cli.main(["export", str(work / "run"), "--base-dir", str(tmp_path)]) == 0
    assert (tmp_path / "translator" / "2" / "saved_model.pb").is_file()  # next version, nothing overwritten


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
    from keras_transformer import runs

    config = config_lib.defaults()
    config["data"]["max_length"] = 30
    # Without XLA (TensorFlow on this CPU-only machine): one bucket per length.
    assert not runs._train_step_uses_xla()
    assert runs.bucket_boundaries(config) == list(range(1, 31))
    # With XLA every shape is a compilation: the pipeline's geometric default.
    monkeypatch.setattr(runs, "_train_step_uses_xla", lambda: True)
    assert runs.bucket_boundaries(config) is None
    config["data"]["bucket_width"] = 8
    assert runs.bucket_boundaries(config) == [8, 16, 24, 32]
    config["data"]["bucket_width"] = 0
    with pytest.raises(runs.RunError, match="data.bucket_width"):
        runs.bucket_boundaries(config)


def test_train_passes_the_run_buckets_to_the_pipeline(trained_run, tmp_path, monkeypatch):
    import keras_transformer.data as data

    _, config_path = trained_run
    seen = []
    original = data.make_dataset

    def recording(*args, **kwargs):
        seen.append(kwargs.get("bucket_boundaries"))
        return original(*args, **kwargs)

    monkeypatch.setattr(data, "make_dataset", recording)
    overrides = [f"output_dir={tmp_path / 'run'}", "training.max_steps=1", "data.bucket_width=8"]
    assert cli.main(["train", "--config", str(config_path), *sum((["--set", o] for o in overrides), [])]) == 0
    assert seen and all(boundaries == [8, 16] for boundaries in seen)
