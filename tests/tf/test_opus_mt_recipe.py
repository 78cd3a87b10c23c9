"""recipes/opus_mt end to end: a tiny random MarianMT folder (written by Transformers,
tests/tf/marian_folder.py) and a small generated corpus, with the documented command's
options shrunk: import, scores before and after, fine-tuning with the imported
tokenizer, both exports, a rerun that skips every stage. Nothing here measures quality."""

import json
import re

import pytest
from marian_folder import make_marian_folder
from test_recipes_workflow import load_recipe, readme_command, stage_records

from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl

pytest.importorskip("transformers")
pytest.importorskip("torch")

SHRINK = ["training.max_steps=3", "training.tokens_per_batch=256", "training.mixed_precision=None",
          "training.save_every_steps=3", "decoding.beam_size=1", "decoding.max_extra_length=4"]


def test_opus_mt_recipe_end_to_end(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ctranslate2")  # the export needs it
    from keras_transformer.export.ctranslate2 import CTranslate2Translator

    folder = make_marian_folder(tmp_path / "opus-mt-tiny", model=True)
    pairs, _ = make_splits(50, 0, seed=4, categories=("numbers",))
    write_jsonl(tmp_path / "domain.jsonl.gz", pairs)
    monkeypatch.chdir(tmp_path)
    documented = readme_command("recipes/opus_mt/run.py")
    words = [str(folder) if word.startswith("hf://") else str(tmp_path / "domain.jsonl.gz")
             if word.endswith(".jsonl.gz") else word for word in documented]
    words += ["--test-size", "6", "--valid-size", "0", *[t for s in SHRINK for t in ("--set", s)]]
    recipe = load_recipe("opus_mt")
    assert recipe.main(words) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "opus_mt"
    for stage in ("[import]", "[3/5] before", "[4/5] fine-tuning", "[5/5] after", "[export]"):
        assert stage in out
    imported, tuned = run / "imported", run / "fine_tuned"
    for path in (imported / "marian_tokenizer").iterdir():
        assert (tuned / "marian_tokenizer" / path.name).read_bytes() == path.read_bytes()
    config = json.loads((tuned / "config.json").read_text())
    assert config["training"]["init_from"] == "runs/opus_mt/imported"
    assert config["training"]["learning_rate_scale"] == 0.04  # recipes/opus_mt/config.yaml
    assert config["model"] == json.loads((imported / "config.json").read_text())["model"]
    scores = {name: json.loads((run / "scores" / f"{name}.json").read_text()) for name in ("new_before", "new_after")}
    assert all(score["result"]["sentences"] == 6 for score in scores.values())
    # Both scores decode under the imported model's own rule (Marian's length rule).
    assert scores["new_before"]["settings"]["decoding"]["length_penalty"] == "length"
    report = json.loads((run / "report.json").read_text())
    assert report["source"] == str(folder) and set(report["scores"]) == {"new_before", "new_after"}
    serving = report["export"]["serving"]
    assert (run / "export" / "serving").is_dir() and re.search(r"serving/translator/\d+$", serving)
    assert (tuned / "marian_tokenizer").is_dir()
    translator = CTranslate2Translator(report["export"]["ctranslate2"], inter_threads=1, intra_threads=1)
    assert len(translator.translate([pairs[0][0], "two cats"], beam_size=1, max_extra_length=4)) == 2

    records = stage_records(run)
    assert recipe.main(words) == 0
    out = capsys.readouterr().out
    assert "import: finished before, skipping" in out and "export: finished before, skipping" in out
    assert "fine-tuning: finished before, skipping" in out
    assert stage_records(run) == records


def test_opus_mt_recipe_bad_arguments(tmp_path, capsys):
    recipe = load_recipe("opus_mt")
    (tmp_path / "c.tsv").write_text("a\tb\n")
    with pytest.raises(SystemExit):
        recipe.main([str(tmp_path / "nowhere"), str(tmp_path / "c.tsv")])
    assert f"SOURCE {tmp_path / 'nowhere'}: no such folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.main([str(tmp_path), str(tmp_path / "none.tsv")])
    assert f"CORPUS {tmp_path / 'none.tsv'}: file not found" in capsys.readouterr().err
    # A folder that is no model: the import's own message, nothing left behind.
    assert recipe.main([str(tmp_path), str(tmp_path / "c.tsv"), "--output-dir", str(tmp_path / "out")]) == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "out" / "imported").exists()
