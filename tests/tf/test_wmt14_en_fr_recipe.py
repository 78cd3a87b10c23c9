"""The WMT14 English-French recipe end to end on a tiny local fixture in WMT's
formats (plain-text training files, newstest .sgm files); no download."""

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "wmt14_en_fr"


def load(name):
    spec = importlib.util.spec_from_file_location(f"wmt14_en_fr_{name}", RECIPE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAIRS = [
    ("The house is small.", "La maison est petite."),
    ("The car is red.", "La voiture est rouge."),
    ("I read a book.", "Je lis un livre."),
    ("We go home &amp; sleep.", "Nous rentrons &amp; dormons à l&#39;hôtel."),
]


def write_sgm(path, sentences, kind):
    lines = [f'<{kind} setid="newstest2014" srclang="any">', '<doc sysid="ref" docid="1" origlang="en">']
    lines += [f'<seg id="{i}">{s}</seg>' for i, s in enumerate(sentences, 1)]
    lines += ["</doc>", f"</{kind}>"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The fixture files, and what `prepare.py local` wrote from them."""
    work = tmp_path_factory.mktemp("wmt14_en_fr")
    (work / "train.en").write_text("".join(en + "\n" for en, _ in PAIRS * 10), encoding="utf-8")
    # An empty French line: the pair is skipped and counted, not misaligned.
    (work / "train.fr").write_text("".join(fr + "\n" for _, fr in PAIRS * 10).replace(
        "Je lis un livre.\n", "\n", 1), encoding="utf-8")
    write_sgm(work / "test.en.sgm", [en for en, _ in PAIRS], "srcset")
    write_sgm(work / "test.fr.sgm", [fr for _, fr in PAIRS], "refset")
    files = ["--train", str(work / "train.en"), str(work / "train.fr"),
             "--valid", str(work / "test.en.sgm"), str(work / "test.fr.sgm"),
             "--test", str(work / "test.en.sgm"), str(work / "test.fr.sgm")]
    assert load("prepare").main(["local", "--out", str(work / "prepared")] + files) == 0
    return work / "prepared"


def read_jsonl(path):
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def test_prepare_writes_english_french_json_lines(prepared):
    train = read_jsonl(prepared / "train.jsonl.gz")
    test = read_jsonl(prepared / "newstest2014.jsonl.gz")
    assert len(train) == 39  # 40 lines, one empty French side skipped
    assert train[0] == {"en": "The house is small.", "fr": "La maison est petite."}
    assert test[3] == {"en": "We go home & sleep.", "fr": "Nous rentrons & dormons à l'hôtel."}
    assert read_jsonl(prepared / "newstest2013.jsonl.gz") == test


def test_prepare_shares_the_english_german_code():
    """One implementation of the WMT readers: both recipes call keras_transformer.data.wmt."""
    from keras_transformer.data import wmt

    prepare = load("prepare")
    assert prepare.read_sgm is wmt.read_sgm and prepare.local_pairs is wmt.local_pairs
    assert prepare.EN_FR.keys == ("en", "fr") and prepare.EN_FR.tfds_name == "wmt14_translate/fr-en"
    assert "def read_sgm" not in (ROOT / "recipes" / "wmt14_en_de" / "prepare.py").read_text()


def test_base_and_big_configs_are_the_papers():
    from keras_transformer import config as config_lib

    base = config_lib.resolve([RECIPE / "base.yaml"])
    big = config_lib.resolve([RECIPE / "big.yaml"])
    assert (base["model"]["preset"], big["model"]["preset"]) == ("base", "big")
    assert base["model"]["dropout"] is None and big["model"]["dropout"] == 0.1  # En-De big: 0.3
    for config in (base, big):
        assert config["data"]["vocabulary_size"] == 32000
        assert config["data"]["target_key"] == "fr"
        assert config["data"]["train"] == "runs/wmt14_en_fr/train.jsonl.gz"
        assert config["training"]["tokens_per_batch"] == 25000 and config["training"]["warmup_steps"] == 4000
        assert config["decoding"]["beam_size"] == 4 and config["decoding"]["alpha"] == 0.6
    assert (base["training"]["average_last"], big["training"]["average_last"]) == (5, 20)


def test_recipe_trains_averages_and_evaluates_end_to_end(prepared, tmp_path):
    """The big config with tiny sizes: 4 steps, 2 checkpoints averaged, beam 4 on newstest2014 in French."""
    output_dir = tmp_path / "run"
    overrides = [
        f"output_dir={output_dir}", f"data.train={prepared / 'train.jsonl.gz'}",
        f"data.valid={prepared / 'newstest2013.jsonl.gz'}", f"data.test={prepared / 'newstest2014.jsonl.gz'}",
        "model.preset=tiny", *TINY_MODEL, "data.vocabulary_size=48",
        "data.tokenizer_model_type=unigram", "training.tokens_per_batch=160", "training.max_steps=4",
        "training.save_every_steps=2", "training.average_last=2", "training.distribute=false",
        "decoding.max_extra_length=4",
    ]
    args = ["--config", str(RECIPE / "big.yaml")]
    for assignment in overrides:
        args += ["--set", assignment]
    assert load("run").main(args) == 0
    config = json.loads((output_dir / "config.json").read_text())
    assert config["data"]["target_key"] == "fr" and config["model"]["dropout"] == 0.1
    result = json.loads((output_dir / "eval.json").read_text())
    assert result["sentences"] == 4
    assert result["decoding"]["beam_size"] == 4 and result["decoding"]["alpha"] == 0.6
    assert len(list((output_dir / "checkpoints").glob("ckpt-*.weights.h5"))) >= 2
    assert (output_dir / "model.keras").is_file()
