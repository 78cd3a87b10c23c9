"""The constituency parsing recipe end to end on tiny data: the embedded trees
(train a few steps, decode, repair or reject, score) and WSJ-style .mrg files."""

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "constituency_parsing"

TINY = [*TINY_MODEL, "data.vocabulary_size=120", "training.tokens_per_batch=400",
        "training.max_steps=4", "training.max_minutes=null", "training.save_every_steps=2",
        "training.average_last=2", "decoding.beam_size=2", "decoding.max_extra_length=30"]


def load_run():
    spec = importlib.util.spec_from_file_location("parsing_run", RECIPE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(path):
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def settings(output_dir, extra=()):
    data = [f"output_dir={output_dir}"] + [f"data.{s}={output_dir / 'data' / f'{s}.jsonl.gz'}"
                                           for s in ("train", "valid", "test")]
    args = []
    for assignment in data + TINY + list(extra):
        args += ["--set", assignment]
    return args


def test_the_paper_preset_and_the_embedded_config():
    from keras_transformer import config as config_lib

    wsj = config_lib.resolve([RECIPE / "wsj.yaml"])
    assert wsj["model"]["preset"] == "big"
    assert (wsj["model"]["num_encoder_layers"], wsj["model"]["num_decoder_layers"]) == (4, 4)
    assert wsj["decoding"] == dict(wsj["decoding"], beam_size=21, alpha=0.3, max_extra_length=300)
    assert (wsj["data"]["source_key"], wsj["data"]["target_key"], wsj["data"]["vocabulary_size"]) == (
        "en", "tree", 16000)
    embedded = config_lib.resolve([RECIPE / "config.yaml"])
    assert embedded["decoding"]["alpha"] == 0.3 and embedded["decoding"]["max_extra_length"] == 300
    assert embedded["training"]["max_minutes"] and embedded["model"]["preset"] == "tiny"


def test_embedded_trees_train_decode_and_score(tmp_path, capsys):
    output_dir = tmp_path / "run"
    args = settings(output_dir) + ["--train-trees", "80", "--test-trees", "6"]
    assert load_run().main(args) == 0
    train = read(output_dir / "data" / "train.jsonl.gz")
    test = read(output_dir / "data" / "test.jsonl.gz")
    assert len(train) == 80 and len(test) == 6
    assert not {r["en"] for r in test} & {r["en"] for r in train}
    assert train[0]["tree"].startswith("(S ") and train[0]["tree"].endswith(" )S")
    result = json.loads((output_dir / "parse_eval.json").read_text())
    assert result["sentences"] == 6 and sum(result["outputs"].values()) == 6
    assert result["decoding"]["alpha"] == 0.3 and result["decoding"]["beam_size"] == 2
    assert 0 <= result["f1"] <= 100 and result["brackets"]["gold"] > 6  # every tree has an S and more
    assert "labelled bracket P" in capsys.readouterr().out


def test_mrg_files_in_wsj_sections_become_the_three_splits(tmp_path):
    wsj = tmp_path / "wsj"
    tree = "( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (NP (-NONE- *T*-1))) (. .)) )\n"
    for section in [f"{s:02d}" for s in range(2, 24)]:
        (wsj / section).mkdir(parents=True)
        (wsj / section / f"wsj_{section}01.mrg").write_text(tree * (2 if section == "02" else 1))
    output_dir = tmp_path / "run"
    assert load_run().main(settings(output_dir) + ["--wsj", str(wsj), "--prepare-only"]) == 0
    train = read(output_dir / "data" / "train.jsonl.gz")
    assert len(train) == 21  # sections 02-21, two trees in 02
    assert train[0] == {"en": "The cat sat .", "tree": "(S (NP XX XX )NP (VP XX )VP . )S",
                        "ptb": "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))"}
    assert len(read(output_dir / "data" / "test.jsonl.gz")) == 1


def test_bad_treebank_input_is_named(tmp_path):
    run = load_run()
    with pytest.raises(SystemExit, match="no WSJ section directories"):
        run.main(settings(tmp_path / "a") + ["--wsj", str(tmp_path), "--prepare-only"])
    broken = tmp_path / "broken.mrg"
    broken.write_text("( (S (NP (DT The)\n")
    with pytest.raises(SystemExit, match=r"broken.mrg:1: bracket opened here is never closed"):
        run.main(settings(tmp_path / "b") + ["--train-mrg", str(broken), "--valid-mrg", str(broken),
                                             "--test-mrg", str(broken), "--prepare-only"])
