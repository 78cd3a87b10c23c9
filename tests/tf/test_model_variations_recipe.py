"""The Table 3 sweep end to end on tiny data: three rows of a few steps each,
the manifest, table and chart, and a rerun that adds a row and skips the
finished ones."""

import importlib.util
import json
from pathlib import Path

from conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "model_variations"

TINY = [*TINY_MODEL, "data.vocabulary_size=120", "training.tokens_per_batch=400",
        "training.save_every_steps=2", "decoding.beam_size=1", "decoding.max_extra_length=5"]


def load_run():
    spec = importlib.util.spec_from_file_location("model_variations_run", RECIPE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arguments(output_dir, rows):
    args = ["--output-dir", str(output_dir), "--rows", rows, "--steps-per-row", "3",
            "--train-pairs", "150", "--heldout-pairs", "12"]
    for assignment in TINY:
        args += ["--set", assignment]
    return args


def test_rows_scale_with_the_base_and_drop_what_does_not_divide():
    from keras_transformer import config as config_lib

    rows_module = load_run()
    base = config_lib.resolve([RECIPE / "config.yaml"])
    rows, dropped = rows_module.table3_rows(base)
    overrides = {name: settings for name, _, settings in rows}
    assert list(overrides)[0] == "base" and overrides["base"] == []
    assert overrides["A1"] == ["model.num_heads=1"] and overrides["A4"] == ["model.num_heads=32"]
    assert overrides["B1"] == ["model.key_dim=4"]  # a quarter of d_k 16 (paper: 16 of 64)
    assert overrides["E"] == ["model.positional_encoding=learned"]
    small = config_lib.resolve([RECIPE / "config.yaml"], assignments=TINY)
    names = [name for name, _, _ in rows_module.table3_rows(small)[0]]
    reasons = dict(rows_module.table3_rows(small)[1])
    assert "A4" not in names and "32 heads" in reasons["A4"]  # d_model 16
    assert "C1" not in names and "base" in reasons["C1"]  # N 1 is the base's


def test_three_rows_then_a_rerun_skips_the_finished_ones(tmp_path, capsys):
    output_dir = tmp_path / "sweep"
    recipe = load_run()
    assert recipe.main(arguments(output_dir, "A1,B1")) == 0
    manifest = json.loads((output_dir / "manifest.json").read_text())
    assert set(manifest["rows"]) == {"A1", "B1"}
    first = {name: entry["results"] for name, entry in manifest["rows"].items()}
    for name, entry in manifest["rows"].items():
        assert entry["status"] == "done" and entry["results"]["steps"] == 3
        assert entry["results"]["perplexity"] > 1 and 0 <= entry["results"]["bleu"] <= 100
        config = json.loads((Path(entry["run_dir"]) / "config.json").read_text())
        assert config["model"]["d_model"] == 16 and config["training"]["max_steps"] == 3
    assert manifest["rows"]["A1"]["columns"]["h"] == 1 and manifest["rows"]["A1"]["columns"]["d_k"] == 16
    assert manifest["rows"]["B1"]["columns"]["d_k"] == 2 and manifest["rows"]["B1"]["columns"]["d_v"] == 8
    # h x d_k is 16 in A1 (1 x 16), 4 in B1 (2 x 2); d_v x h is 16 in both: B1 has
    # 12 fewer columns in the query and key projections (16 inputs + a bias each)
    # of its 3 attention layers (encoder self, decoder self and cross).
    assert first["A1"]["params"] - first["B1"]["params"] == 3 * 2 * 12 * (16 + 1)
    assert (output_dir / "tokenizer.model").is_file()
    capsys.readouterr()

    # "Interrupted" before E: run again with E added; A1 and B1 are not retrained.
    assert recipe.main(arguments(output_dir, "A1,B1,E")) == 0
    out = capsys.readouterr().out
    assert "row A1: done before" in out and "row B1: done before" in out
    manifest = json.loads((output_dir / "manifest.json").read_text())
    assert {name: manifest["rows"][name]["results"] for name in ("A1", "B1")} == first
    assert manifest["rows"]["E"]["status"] == "done"
    assert manifest["rows"]["E"]["overrides"] == ["model.positional_encoding=learned"]
    # E (h 2, learned positions) has A1's weights (h x d_k = d_model in both) plus a
    # (max_length, d_model 16) position table.
    extra = manifest["rows"]["E"]["results"]["params"] - first["A1"]["params"]
    assert extra > 0 and extra % 16 == 0
    assert (Path(manifest["rows"]["E"]["run_dir"]) / "tokenizer.model").read_bytes() == (
        output_dir / "tokenizer.model").read_bytes()

    table = (output_dir / "table3.md").read_text()
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    assert "d_k" in lines[0] and "PPL (dev)" in lines[0] and "BLEU (test)" in lines[0]
    assert [line.split("|")[2].strip() for line in lines[1:]] == ["A1", "B1", "E"]
    assert "learned" in lines[3] and "(E)" in lines[3] and "(A)" in lines[1]
    assert table in out
    png = (output_dir / "table3.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000

    # A row interrupted after its training (model.keras written) is measured, not trained again.
    manifest["rows"]["E"]["status"] = "running"
    (output_dir / "manifest.json").write_text(json.dumps(manifest))
    assert recipe.main(arguments(output_dir, "E")) == 0
    resumed = json.loads((output_dir / "manifest.json").read_text())["rows"]["E"]
    assert resumed["status"] == "done" and resumed["results"]["steps"] == 3
    assert "training finished before" in capsys.readouterr().out

    # A changed base must not silently reuse the finished rows.
    assert recipe.main(arguments(output_dir, "A1") + ["--set", "model.d_ff=48"]) == 2
    assert "another configuration" in capsys.readouterr().err
