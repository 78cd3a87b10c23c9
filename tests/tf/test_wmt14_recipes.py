"""The WMT14 recipes (English-German and English-French) end to end on tiny
local fixtures in WMT's formats (plain-text training files, newstest .sgm
files); no download. The tests that hold for both pairs run once per pair."""

import gzip
import importlib.util
import io
import json
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]

# Per pair: the recipe, the target key, the fixture's sentences (HTML escapes
# as .sgm files carry them), the tokenizer size the tiny sentences allow.
PAIRS = {
    "en_de": ("de", 40, [
        ("The house is small.", "Das Haus ist klein."),
        ("The car is red.", "Das Auto ist rot."),
        ("I read a book.", "Ich lese ein Buch."),
        ("We go home &amp; sleep.", "Wir gehen nach Hause &amp; schlafen."),
    ]),
    "en_fr": ("fr", 48, [
        ("The house is small.", "La maison est petite."),
        ("The car is red.", "La voiture est rouge."),
        ("I read a book.", "Je lis un livre."),
        ("We go home &amp; sleep.", "Nous rentrons &amp; dormons à l&#39;hôtel."),
    ]),
}


def recipe_dir(pair):
    return ROOT / "recipes" / f"wmt14_{pair}"


def load(pair, name):
    spec = importlib.util.spec_from_file_location(f"wmt14_{pair}_{name}", recipe_dir(pair) / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_sgm(path, sentences, kind):
    lines = [f'<{kind} setid="newstest2014" srclang="any">', '<doc sysid="ref" docid="1" origlang="en">']
    lines += [f'<seg id="{i}">{s}</seg>' for i, s in enumerate(sentences, 1)]
    lines += ["</doc>", f"</{kind}>"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_jsonl(path):
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def local_files(work, target):
    return ["--train", str(work / "train.en"), str(work / f"train.{target}"),
            "--valid", str(work / "test.en.sgm"), str(work / f"test.{target}.sgm"),
            "--test", str(work / "test.en.sgm"), str(work / f"test.{target}.sgm")]


@pytest.fixture(scope="module", params=sorted(PAIRS))
def prepared(request, tmp_path_factory):
    """(pair, fixture directory, what `prepare.py local` wrote from it)."""
    pair = request.param
    target, _, pairs = PAIRS[pair]
    work = tmp_path_factory.mktemp(f"wmt14_{pair}")
    (work / "train.en").write_text("".join(en + "\n" for en, _ in pairs * 10), encoding="utf-8")
    # An empty target line: the pair is skipped and counted, not misaligned.
    (work / f"train.{target}").write_text(
        "".join(t + "\n" for _, t in pairs * 10).replace(pairs[2][1] + "\n", "\n", 1), encoding="utf-8")
    write_sgm(work / "test.en.sgm", [en for en, _ in pairs], "srcset")
    write_sgm(work / f"test.{target}.sgm", [t for _, t in pairs], "refset")
    assert load(pair, "prepare").main(["local", "--out", str(work / "prepared")] + local_files(work, target)) == 0
    return pair, work, work / "prepared"


def test_prepare_writes_json_lines(prepared):
    import html

    pair, _, out = prepared
    target, _, pairs = PAIRS[pair]
    train = read_jsonl(out / "train.jsonl.gz")
    test = read_jsonl(out / "newstest2014.jsonl.gz")
    assert len(train) == 39  # 40 lines, one empty target side skipped
    assert train[0] == {"en": pairs[0][0], target: pairs[0][1]}
    # .sgm escapes are undone.
    assert test[3] == {"en": "We go home & sleep.", target: html.unescape(pairs[3][1])}
    assert "&" in test[3][target] and "&amp;" not in test[3][target]
    assert read_jsonl(out / "newstest2013.jsonl.gz") == test


def test_prepare_names_bad_files(prepared, tmp_path):
    from keras_transformer.data import CorpusError

    pair, work, _ = prepared
    target = PAIRS[pair][0]
    prepare = load(pair, "prepare")
    broken = tmp_path / "broken.sgm"
    broken.write_text('<seg id="1">no closing tag\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"broken.sgm:1: malformed <seg>"):
        prepare.read_sgm(broken)
    short = tmp_path / "short.sgm"
    write_sgm(short, ["only one"], "refset")
    with pytest.raises(CorpusError, match="has 4 segments but .*short.sgm has 1"):
        prepare.local_pairs(work / "test.en.sgm", short)
    with pytest.raises(CorpusError, match="only one of them is a .sgm file"):
        prepare.local_pairs(work / "train.en", short)
    # The command line prints the same message and exits with status 1.
    files = local_files(work, target)
    files[files.index(str(work / f"test.{target}.sgm"))] = str(short)  # the validation reference
    with pytest.raises(SystemExit, match="has 4 segments but .*short.sgm has 1"):
        prepare.main(["local", "--out", str(tmp_path / "out")] + files)


def test_both_recipes_share_the_wmt_code():
    """One implementation of the WMT readers: both prepare.py scripts call keras_transformer.data.wmt."""
    from keras_transformer.data import wmt

    for pair, keys, tfds_name in (("en_de", ("en", "de"), "wmt14_translate/de-en"),
                                  ("en_fr", ("en", "fr"), "wmt14_translate/fr-en")):
        prepare = load(pair, "prepare")
        assert prepare.read_sgm is wmt.read_sgm and prepare.local_pairs is wmt.local_pairs
        assert "def read_sgm" not in (recipe_dir(pair) / "prepare.py").read_text()
    assert wmt.EN_FR.keys == ("en", "fr") and wmt.EN_FR.tfds_name == "wmt14_translate/fr-en"
    assert wmt.EN_DE.keys == ("en", "de") and wmt.EN_DE.tfds_name == "wmt14_translate/de-en"


def test_accumulation_reaches_the_papers_batch():
    run = load("en_de", "run")
    assert run.accumulation_plan(25000, 1) == (25000, None)
    assert run.accumulation_plan(6250, 2) == (12500, 2)
    assert run.accumulation_plan(4096, 1) == (4096, 7)  # 28,672 tokens per update


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_base_and_big_configs_are_the_papers(pair):
    """Section 5 and Table 3: the same recipe for both pairs except the vocabulary
    (37,000 shared pieces En-De, 32,000 En-Fr) and big's dropout (0.3 En-De, 0.1 En-Fr)."""
    from keras_transformer import config as config_lib

    base = config_lib.resolve([recipe_dir(pair) / "base.yaml"])
    big = config_lib.resolve([recipe_dir(pair) / "big.yaml"])
    target = PAIRS[pair][0]
    assert (base["model"]["preset"], big["model"]["preset"]) == ("base", "big")
    # The dropout of the model each config makes (a None in the file means the
    # preset's), not the file's entry: what Transformer.from_preset passes to the
    # constructor, the preset's sizes updated with the config's overrides. Built
    # without weights (big has 213M parameters; building both took 12-50 s here).
    from keras_transformer import Transformer
    from keras_transformer.config import model_overrides
    from keras_transformer.models.presets import PRESETS

    def dropout_of(config):
        model = config["model"]
        return Transformer(vocabulary_size=100, **{**PRESETS[model["preset"]], **model_overrides(model)}).dropout

    assert dropout_of(base) == 0.1
    assert dropout_of(big) == {"en_de": 0.3, "en_fr": 0.1}[pair]
    for config in (base, big):
        assert config["data"]["vocabulary_size"] == {"en_de": 37000, "en_fr": 32000}[pair]
        assert config["data"]["target_key"] == target
        assert config["data"]["train"] == f"runs/wmt14_{pair}/train.jsonl.gz"
        assert config["training"]["tokens_per_batch"] == 25000 and config["training"]["warmup_steps"] == 4000
        assert config["training"]["label_smoothing"] == 0.1
        assert config["decoding"]["beam_size"] == 4 and config["decoding"]["alpha"] == 0.6
        assert config["decoding"]["max_extra_length"] == 50
    assert (base["training"]["average_last"], big["training"]["average_last"]) == (5, 20)
    assert (base["training"]["max_steps"], big["training"]["max_steps"]) == (100000, 300000)


def test_recipe_trains_averages_and_evaluates_end_to_end(prepared, tmp_path):
    """Tiny sizes on the recipe's config (base En-De, big En-Fr): 6 steps, the last 2 of
    3 checkpoints averaged, beam 4 on newstest2014."""
    pair, _, out = prepared
    target, vocabulary_size, _ = PAIRS[pair]
    config_file = recipe_dir(pair) / ("base.yaml" if pair == "en_de" else "big.yaml")
    output_dir = tmp_path / "run"
    overrides = [
        f"output_dir={output_dir}", f"data.train={out / 'train.jsonl.gz'}",
        f"data.valid={out / 'newstest2013.jsonl.gz'}", f"data.test={out / 'newstest2014.jsonl.gz'}",
        "model.preset=tiny", *TINY_MODEL, f"data.vocabulary_size={vocabulary_size}",
        "data.tokenizer_model_type=unigram", "training.tokens_per_batch=160", "training.max_steps=6",
        "training.save_every_steps=2", "training.average_last=2", "training.distribute=false",
        "training.warmup_steps=4",  # large steps: each checkpoint's weights differ plainly from the last
        "decoding.max_extra_length=4",
    ]
    args = ["--config", str(config_file)]
    for assignment in overrides:
        args += ["--set", assignment]
    assert load(pair, "run").main(args) == 0
    config = json.loads((output_dir / "config.json").read_text())
    assert config["data"]["target_key"] == target
    if pair == "en_fr":
        assert config["model"]["dropout"] == 0.1
    result = json.loads((output_dir / "eval.json").read_text())
    assert result["sentences"] == 4
    assert result["decoding"]["beam_size"] == 4 and result["decoding"]["alpha"] == 0.6
    checkpoints = sorted((output_dir / "checkpoints").glob("ckpt-*.weights.h5"))
    assert [path.name for path in checkpoints] == [f"ckpt-{step:09d}.weights.h5" for step in (2, 4, 6)]
    # model.keras holds the mean of the last two checkpoints' model weights, worked
    # out here from the files themselves (h5py, float64), not by the package's averaging.
    with zipfile.ZipFile(output_dir / "model.keras") as archive:
        saved = model_arrays(io.BytesIO(archive.read("model.weights.h5")))
    steps = {path.name: model_arrays(path) for path in checkpoints}
    last_two = [steps["ckpt-000000004.weights.h5"], steps["ckpt-000000006.weights.h5"]]
    assert saved.keys() == last_two[0].keys() == last_two[1].keys() and len(saved) > 10
    for name, value in saved.items():
        expected = expected_mean(last_two, name)
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7, err_msg=name)
    # Not the newest checkpoint alone, nor the mean of all three.
    assert any(not np.allclose(value, last_two[1][name]) for name, value in saved.items())
    first = steps["ckpt-000000002.weights.h5"]
    assert any(not np.allclose(value, (first[name] + 2 * expected_mean(last_two, name)) / 3, rtol=1e-6, atol=1e-7)
               for name, value in saved.items())


def expected_mean(arrays, name):
    return sum(a[name].astype("float64") for a in arrays) / len(arrays)


def model_arrays(file):
    """{dataset path: array} of a Keras weights file's floating-point model
    variables (everything outside optimizer/: layers, their vars)."""
    arrays = {}
    with h5py.File(file, "r") as handle:
        def visit(name, item):
            if isinstance(item, h5py.Dataset) and not name.startswith("optimizer/") and item.dtype.kind == "f":
                arrays[name] = item[()]
        handle.visititems(visit)
    return arrays
