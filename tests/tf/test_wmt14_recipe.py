"""The WMT14 recipe end to end on a tiny local fixture in WMT's formats
(plain-text training files, newstest .sgm files); no download."""

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "wmt14_en_de"


def load(name):
    spec = importlib.util.spec_from_file_location(f"wmt14_{name}", RECIPE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAIRS = [
    ("The house is small.", "Das Haus ist klein."),
    ("The car is red.", "Das Auto ist rot."),
    ("I read a book.", "Ich lese ein Buch."),
    ("We go home &amp; sleep.", "Wir gehen nach Hause &amp; schlafen."),
]


def write_sgm(path, sentences, kind):
    lines = [f'<{kind} setid="newstest2014" srclang="any">', '<doc sysid="ref" docid="1" origlang="en">']
    lines += [f'<seg id="{i}">{s}</seg>' for i, s in enumerate(sentences, 1)]
    lines += ["</doc>", f"</{kind}>"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    work = tmp_path_factory.mktemp("wmt14")
    (work / "train.en").write_text("".join(en + "\n" for en, _ in PAIRS * 10), encoding="utf-8")
    (work / "train.de").write_text("".join(de + "\n" for _, de in PAIRS * 10), encoding="utf-8")
    write_sgm(work / "test.en.sgm", [en for en, _ in PAIRS], "srcset")
    write_sgm(work / "test.de.sgm", [de for _, de in PAIRS], "refset")
    return work


def read_jsonl(path):
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def test_prepare_local_files(fixture_dir):
    out = fixture_dir / "prepared"
    prepare = load("prepare")
    files = ["--train", str(fixture_dir / "train.en"), str(fixture_dir / "train.de"),
             "--valid", str(fixture_dir / "test.en.sgm"), str(fixture_dir / "test.de.sgm"),
             "--test", str(fixture_dir / "test.en.sgm"), str(fixture_dir / "test.de.sgm")]
    assert prepare.main(["local", "--out", str(out)] + files) == 0
    train = read_jsonl(out / "train.jsonl.gz")
    test = read_jsonl(out / "newstest2014.jsonl.gz")
    assert len(train) == 40 and train[0] == {"en": PAIRS[0][0], "de": PAIRS[0][1]}
    assert test[3] == {"en": "We go home & sleep.", "de": "Wir gehen nach Hause & schlafen."}  # unescaped


def test_prepare_names_bad_files(fixture_dir, tmp_path):
    from keras_transformer.data import CorpusError

    prepare = load("prepare")
    broken = tmp_path / "broken.sgm"
    broken.write_text('<seg id="1">no closing tag\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"broken.sgm:1: malformed <seg>"):
        prepare.read_sgm(broken)
    short = tmp_path / "short.sgm"
    write_sgm(short, ["only one"], "refset")
    with pytest.raises(CorpusError, match="has 4 segments but .*short.sgm has 1"):
        prepare.local_pairs(fixture_dir / "test.en.sgm", short)
    with pytest.raises(CorpusError, match="only one of them is a .sgm file"):
        prepare.local_pairs(fixture_dir / "train.en", short)
    # The command line prints the same message and exits with status 1.
    files = ["--train", str(fixture_dir / "train.en"), str(fixture_dir / "train.de"),
             "--valid", str(fixture_dir / "test.en.sgm"), str(short),
             "--test", str(fixture_dir / "test.en.sgm"), str(fixture_dir / "test.de.sgm")]
    with pytest.raises(SystemExit, match="has 4 segments but .*short.sgm has 1"):
        prepare.main(["local", "--out", str(tmp_path / "out")] + files)


def test_accumulation_reaches_the_papers_batch():
    run = load("run")
    assert run.accumulation_plan(25000, 1) == (25000, None)
    assert run.accumulation_plan(6250, 2) == (12500, 2)
    assert run.accumulation_plan(4096, 1) == (4096, 7)  # 28,672 tokens per update


def test_base_and_big_configs_are_the_papers():
    from keras_transformer import config as config_lib

    base = config_lib.resolve([RECIPE / "base.yaml"])
    big = config_lib.resolve([RECIPE / "big.yaml"])
    assert (base["model"]["preset"], big["model"]["preset"]) == ("base", "big")
    for config in (base, big):
        assert config["training"]["tokens_per_batch"] == 25000
        assert config["training"]["warmup_steps"] == 4000
        assert config["training"]["label_smoothing"] == 0.1
        assert config["decoding"]["beam_size"] == 4 and config["decoding"]["alpha"] == 0.6
        assert config["decoding"]["max_extra_length"] == 50
        assert config["data"]["vocabulary_size"] == 37000
    assert (base["training"]["average_last"], big["training"]["average_last"]) == (5, 20)
    assert (base["training"]["max_steps"], big["training"]["max_steps"]) == (100000, 300000)


def test_recipe_trains_averages_and_evaluates_end_to_end(fixture_dir, tmp_path):
    """The base config with tiny sizes: 4 steps, 2 checkpoints averaged, beam 4 on newstest."""
    prepared = fixture_dir / "prepared"
    if not (prepared / "train.jsonl.gz").exists():
        test_prepare_local_files(fixture_dir)
    run = load("run")
    output_dir = tmp_path / "run"
    overrides = [
        f"output_dir={output_dir}", f"data.train={prepared / 'train.jsonl.gz'}",
        f"data.valid={prepared / 'newstest2013.jsonl.gz'}", f"data.test={prepared / 'newstest2014.jsonl.gz'}",
        "model.preset=tiny", *TINY_MODEL, "data.vocabulary_size=40",
        "data.tokenizer_model_type=unigram", "training.tokens_per_batch=160", "training.max_steps=4",
        "training.save_every_steps=2", "training.average_last=2", "training.distribute=false",
        "decoding.max_extra_length=4",
    ]
    args = ["--config", str(RECIPE / "base.yaml")]
    for assignment in overrides:
        args += ["--set", assignment]
    assert run.main(args) == 0
    result = json.loads((output_dir / "eval.json").read_text())
    assert result["sentences"] == 4
    assert result["decoding"]["beam_size"] == 4 and result["decoding"]["alpha"] == 0.6
    assert len(list((output_dir / "checkpoints").glob("ckpt-*.weights.h5"))) >= 2
    assert (output_dir / "model.keras").is_file()
