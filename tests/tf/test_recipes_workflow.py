"""recipes/back_translation and recipes/fine_tuning end to end on generated corpora: the
README's own commands (corpus paths replaced, shrunk with --set), what each stage writes,
reruns that skip finished stages, and argument errors. Tiny models and 2 steps per
training: nothing here measures quality."""

import gzip
import importlib.util
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import TINY_MODEL

from keras_transformer.data import SubwordTokenizer
from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl
from keras_transformer.run import stages

ROOT = Path(__file__).resolve().parents[2]
SHRINK = [
    *TINY_MODEL, "data.vocabulary_size=120", "training.tokens_per_batch=512",
    "training.max_steps=2", "training.mixed_precision=None", "decoding.beam_size=1", "decoding.max_extra_length=4",
]


def load_recipe(name):
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", ROOT / "recipes" / name / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_command(script):
    """The documented ```bash command that runs `script` (README.md or docs/recipes.md), as words after
    `python SCRIPT`."""
    text = "".join((ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "docs/recipes.md"))
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["python", script]:
                return words[2:]
    raise AssertionError(f"README.md and docs/recipes.md have no command `python {script}`")


def shrunk(words, replacements):
    words = [replacements.get(Path(word).name, word) for word in words]
    return words + [token for setting in SHRINK for token in ("--set", setting)]


def lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def stage_records(directory):
    return {path: path.stat().st_mtime_ns for path in sorted(Path(directory).rglob("stage.json"))}


# --------------------------------------------------------------------------- stage records


def test_stage_records_skip_and_refuse_other_settings(tmp_path):
    record = tmp_path / "stage" / "stage.json"
    assert stages.finished(record, {"a": 1}) is None
    stages.mark_finished(record, {"a": 1, "b": {"c": (1, 2)}}, count=3)
    assert stages.finished(record, {"a": 1, "b": {"c": [1, 2]}})["count"] == 3
    with pytest.raises(stages.StageError, match=r"stage\.json: this stage finished with other settings "
                                                r"\(b\.c: \[1, 2\] then, 3 now\)\. Delete .*stage to redo"):
        stages.finished(record, {"a": 1, "b": {"c": 3}})
    record.write_text("{")
    with pytest.raises(stages.StageError, match="unreadable stage record"):
        stages.finished(record, {"a": 1})


# --------------------------------------------------------------------------- back-translation


@pytest.fixture(scope="module")
def back_translation():
    return load_recipe("back_translation")


@pytest.fixture(scope="module")
def bt_corpora(tmp_path_factory):
    """Two JSON-lines files of 160 generated pairs each (the README names two corpora)."""
    work = tmp_path_factory.mktemp("bt")
    pairs, _ = make_splits(320, 0, seed=4)
    write_jsonl(work / "first.jsonl.gz", pairs[:160])
    write_jsonl(work / "second.jsonl.gz", pairs[160:])
    return work


def bt_words(work, *extra):
    words = readme_command("recipes/back_translation/run.py")
    replacements = {"ddtp_en_de.jsonl.gz": str(work / "first.jsonl.gz"),
                    "po_all.jsonl.gz": str(work / "second.jsonl.gz")}
    assert set(replacements) <= {Path(word).name for word in words}
    return shrunk(words, replacements) + ["--test-size", "20", "--valid-size", "10", "--monolingual-size", "100",
                                          *extra]


def test_back_translation_end_to_end(back_translation, bt_corpora, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    words = bt_words(bt_corpora)
    assert back_translation.main(words) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "back_translation"
    for stage in ("[1/6] data", "[2/6] reverse model de->en", "[3/6] synthetic", "[4/6] forward model en->de",
                  "[5/6] baseline", "[6/6] scoring"):
        assert stage in out
    assert "with sampling (unrestricted, seed 0)" in out

    data = json.loads((run / "data" / "stage.json").read_text())["sizes"]
    assert data == {"train": 190, "valid": 10, "test": 20, "monolingual": 100}
    monolingual = lines(run / "data" / "monolingual.jsonl.gz")
    train = lines(run / "data" / "train.jsonl.gz")
    test = lines(run / "data" / "test.jsonl.gz")
    assert len(monolingual) == 100 and set(monolingual[0]) == {"de"}
    # The monolingual German is held out of the real training pairs and of the test split.
    german = {row["de"] for row in monolingual}
    assert not german & {row["de"] for row in train + test}

    for stage in ("reverse", "forward", "baseline"):
        assert (run / stage / "model.keras").is_file() and (run / stage / "stage.json").is_file()
    reverse = json.loads((run / "reverse" / "config.json").read_text())["data"]
    assert (reverse["source_key"], reverse["target_key"]) == ("de", "en")
    assert json.loads((run / "baseline" / "config.json").read_text())["data"]["train"].endswith("data/train.jsonl.gz")

    synthetic = lines(run / "synthetic" / "synthetic.jsonl.gz")
    assert [row["de"] for row in synthetic] == [row["de"] for row in monolingual]  # one line per sentence
    record = json.loads((run / "synthetic" / "stage.json").read_text())
    assert record["settings"]["options"] == {"search": "sampling", "temperature": 1.0, "top_k": 0, "top_p": 1.0,
                                             "seed": 0}
    assert record["sentences"] == 100
    forward = lines(run / "forward" / "train.jsonl.gz")
    kept = [row for row in synthetic if row["en"].strip()]
    assert forward == train + kept
    assert not any(row["en"].startswith("<BT>") for row in forward)

    report = json.loads((run / "report_forward.json").read_text())
    assert set(report["scores"]) == {"baseline", "forward"} and report["test_sentences"] == 20
    for name in ("baseline", "forward"):
        score = json.loads((run / "scores" / f"{name}.json").read_text())
        assert score["result"]["sentences"] == 20
        assert score["result"]["corpus"] == "runs/back_translation/data/test.jsonl.gz"
        assert 0 <= score["result"]["bleu"] <= 100
        assert not (run / name / "eval.json").exists()
    assert re.search(r"baseline \(190 real pairs\) +BLEU +[\d.]+, chrF +[\d.]+\n +forward \(\+ \d+ synthetic", out)

    # A rerun skips every stage.
    records = stage_records(run)
    assert back_translation.main(words) == 0
    out = capsys.readouterr().out
    assert out.count("before, skipping") == 5 and out.count("scored before") == 2
    assert stage_records(run) == records

    # Tagged, with the reverse model given: only the tagged forward model is new.
    assert back_translation.main(words + ["--tagged", "--reverse-run", str(run / "reverse")]) == 0
    out = capsys.readouterr().out
    assert "using " + str(run / "reverse") in out and "sources tagged <BT>" in out
    assert "synthetic: translated before, skipping" in out and "baseline: finished before, skipping" in out
    tagged = lines(run / "forward_tagged" / "train.jsonl.gz")
    assert tagged[:len(train)] == train
    assert [row["en"] for row in tagged[len(train):]] == [f"<BT> {row['en']}" for row in kept]
    tokenizer = SubwordTokenizer.load(run / "forward_tagged" / "tokenizer.model")
    tag = tokenizer.piece_to_id("<BT>")
    assert tokenizer.id_to_piece(tag) == "<BT>"
    assert tag in tokenizer.tokenize([tagged[-1]["en"]]).to_list()[0]
    assert tokenizer.id_to_piece(SubwordTokenizer.load(run / "forward" / "tokenizer.model").piece_to_id("<BT>")) \
        != "<BT>"
    assert set(json.loads((run / "report_forward_tagged.json").read_text())["scores"]) == {"baseline",
                                                                                           "forward_tagged"}

    # Other settings for a finished stage: an error naming it, nothing redone.
    assert back_translation.main(words + ["--set", "training.max_steps=3"]) == 2
    error = capsys.readouterr().err
    assert ("reverse/stage.json: this stage finished with other settings "
            "(config.training.max_steps: 2 then, 3 now)") in error
    # A redone earlier stage: the later one that used its old output refuses to count as finished.
    shutil.rmtree(run / "synthetic")
    assert back_translation.main(words + ["--top-k", "5"]) == 2
    captured = capsys.readouterr()
    assert "with sampling (top-k 5, seed 0)" in captured.out
    assert json.loads((run / "synthetic" / "stage.json").read_text())["settings"]["options"]["top_k"] == 5
    assert "forward/stage.json: this stage finished with other settings (inputs.synthetic_sha256: " in captured.err


@pytest.mark.parametrize("extra, message", [
    (["--monolingual", "missing.de.txt"], "--monolingual missing.de.txt: file not found"),
    (["--reverse-run", "REVERSE", "--reverse-set", "training.max_steps=5"],
     "--reverse-set configures the reverse model that --reverse-run replaces"),
    (["--reverse-run", "EMPTY"], "--reverse-run EMPTY: no model.keras there"),
    (["--search", "beam", "--top-k", "10"], "--top-k: sampling options, but --search is beam"),
    (["--beam-size", "4"], "--beam-size: a beam-search option, but --search is sampling"),
    (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    (["--tag", "<T>"], "--tag names the tag of --tagged"),
    (["--minutes-per-stage", "5", "--set", "training.max_minutes=3"], "--minutes-per-stage and --set training"),
    (["--monolingual-size", "0"], "--monolingual-size must be >= 1"),
])
def test_back_translation_argument_errors(back_translation, bt_corpora, tmp_path, capsys, extra, message):
    (tmp_path / "REVERSE").mkdir()
    (tmp_path / "REVERSE" / "model.keras").write_bytes(b"")
    (tmp_path / "REVERSE" / "tokenizer.model").write_bytes(b"")
    (tmp_path / "EMPTY").mkdir()
    extra = [str(tmp_path / word) if word in ("REVERSE", "EMPTY") else word for word in extra]
    message = message.replace("EMPTY", str(tmp_path / "EMPTY"))
    with pytest.raises(SystemExit) as exit:
        back_translation.main([str(bt_corpora / "first.jsonl.gz"), *extra])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_back_translation_monolingual_file_and_too_little_data(back_translation, bt_corpora, tmp_path, capsys):
    """--monolingual FILE: its sentences, less the empty ones and those equal to a test or
    validation reference (which would leak it); a split left empty is an error naming the options."""
    corpus = str(bt_corpora / "first.jsonl.gz")
    test_german = [row["de"] for row in lines(corpus)]
    output = tmp_path / "run"
    common = ["--output-dir", str(output), "--test-size", "20", "--valid-size", "10", "--set", "training.max_steps=1"]
    assert back_translation.main([corpus, "--monolingual-size", "150", *common]) == 2
    assert "the training split is empty (160 pairs in all); lower --test-size, --valid-size or --monolingual-size" \
        in capsys.readouterr().err
    # Data stage only: a reverse run that is not one stops the recipe right after it.
    news = tmp_path / "news.de.txt"
    news.write_text("Der Hund schläft.\n\n  Die Katze isst.  \n" + "\n".join(test_german) + "\n", encoding="utf-8")
    args = back_translation.parse_arguments([corpus, "--monolingual", str(news), *common])
    from keras_transformer import config as config_lib

    config = config_lib.resolve([back_translation.PARALLEL_TEXT / "config.yaml"])
    sizes = back_translation.prepare_data(args, config, output / "data")
    assert sizes == {"train": 130, "valid": 10, "test": 20, "monolingual": 2 + 130}
    monolingual = [row["de"] for row in lines(output / "data" / "monolingual.jsonl.gz")]
    assert monolingual[:2] == ["Der Hund schläft.", "Die Katze isst."]
    held_out = {row["de"] for name in ("test", "valid") for row in lines(output / "data" / f"{name}.jsonl.gz")}
    assert not held_out & set(monolingual)
    assert "30 equal to a test or validation reference dropped" in capsys.readouterr().out


def test_back_translation_missing_corpus(back_translation, tmp_path, capsys):
    with pytest.raises(SystemExit):
        back_translation.main([str(tmp_path / "nowhere.jsonl.gz")])
    assert f"CORPUS {tmp_path / 'nowhere.jsonl.gz'}: file not found" in capsys.readouterr().err


# --------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def fine_tuning():
    return load_recipe("fine_tuning")


@pytest.fixture(scope="module")
def domains(tmp_path_factory):
    """Two categories of the generator as two domains."""
    work = tmp_path_factory.mktemp("domains")
    for name, categories in (("a", ("numbers", "dates")), ("b", ("modal_verbs", "perfect_tense"))):
        pairs, _ = make_splits(150, 0, seed=5, categories=categories)
        write_jsonl(work / f"{name}.jsonl.gz", pairs)
    return work


def test_fine_tuning_end_to_end(fine_tuning, domains, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    words = shrunk(readme_command("recipes/fine_tuning/run.py"),
                   {"ddtp_en_de.jsonl.gz": str(domains / "a.jsonl.gz"), "po_all.jsonl.gz": str(domains / "b.jsonl.gz")})
    words += ["--test-size", "15", "--valid-size", "5", "--finetune-set", "training.warmup_steps=7"]
    assert fine_tuning.main(words) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "fine_tuning"
    for stage in ("[1/5] base model on", "[2/5] new domain", "[3/5] before", "[4/5] fine-tuning", "[5/5] after"):
        assert stage in out
    assert json.loads((run / "base" / "data" / "split.json").read_text())["sizes"] == {"train": 130, "valid": 5,
                                                                                        "test": 15}
    new_test = lines(run / "fine_tuned" / "data" / "test.jsonl.gz")
    assert len(new_test) == 15 and {row["de"] for row in new_test} <= {
        json.loads(line)["de"] for line in gzip.open(domains / "b.jsonl.gz", "rt")}
    base_config = json.loads((run / "base" / "config.json").read_text())
    tuned_config = json.loads((run / "fine_tuned" / "config.json").read_text())
    assert tuned_config["training"]["init_from"] == str(Path("runs/fine_tuning/base"))
    assert tuned_config["training"]["warmup_steps"] == 7 and base_config["training"]["warmup_steps"] != 7
    assert tuned_config["data"]["train"].endswith("fine_tuned/data/train.jsonl.gz")
    assert (run / "fine_tuned" / "tokenizer.model").read_bytes() == (run / "base" / "tokenizer.model").read_bytes()
    scores = {name: json.loads((run / "scores" / f"{name}.json").read_text())
              for name in ("new_before", "new_after", "base_before", "base_after")}
    assert scores["new_before"]["settings"]["model"] == str((run / "base" / "model.keras").resolve())
    assert scores["new_after"]["settings"]["model"] == str((run / "fine_tuned" / "model.keras").resolve())
    assert scores["new_before"]["settings"]["corpus"] == scores["new_after"]["settings"]["corpus"]
    assert all(score["result"]["sentences"] == 15 for score in scores.values())
    report = json.loads((run / "report.json").read_text())
    assert set(report["scores"]) == set(scores)
    assert re.search(r"new domain test split \(15 sentences.*\n  before fine-tuning  BLEU +[\d.]+, chrF +[\d.]+\n"
                     r"  after fine-tuning   BLEU", out)

    records = stage_records(run)
    assert fine_tuning.main(words) == 0
    assert capsys.readouterr().out.count("before, skipping") == 4
    assert stage_records(run) == records

    # The same base as --base-run: the fine-tuning and its scores are the same, so skipped too.
    assert fine_tuning.main([word for word in words if word != str(domains / "a.jsonl.gz") and word != "--base-corpus"]
                            + ["--base-run", "runs/fine_tuning/base"]) == 0
    out = capsys.readouterr().out
    assert "using runs/fine_tuning/base (--base-run)" in out and "fine-tuning: finished before, skipping" in out
    assert "base domain test split" not in out


@pytest.mark.parametrize("extra, message", [
    (["--base-run", "BASE", "--base-corpus", "A"], "--base-corpus trains the base model that --base-run gives"),
    (["--base-run", "EMPTY"], "--base-run EMPTY: no model.keras there"),
    (["--base-corpus", "missing.jsonl"], "--base-corpus missing.jsonl: file not found"),
    (["--base-corpus", "A", "--new-corpus", "missing.jsonl"], "--new-corpus missing.jsonl: file not found"),
    (["--base-corpus", "A", "--minutes-per-stage", "0"], "--minutes-per-stage must be > 0"),
])
def test_fine_tuning_argument_errors(fine_tuning, domains, tmp_path, capsys, extra, message):
    (tmp_path / "BASE").mkdir()
    for name in ("model.keras", "tokenizer.model"):
        (tmp_path / "BASE" / name).write_bytes(b"")
    (tmp_path / "EMPTY").mkdir()
    paths = {"BASE": str(tmp_path / "BASE"), "EMPTY": str(tmp_path / "EMPTY"), "A": str(domains / "a.jsonl.gz")}
    extra = [paths.get(word, word) for word in extra]
    message = message.replace("EMPTY", paths["EMPTY"])
    with pytest.raises(SystemExit) as exit:
        fine_tuning.main(["--new-corpus", str(domains / "b.jsonl.gz"), *extra])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_a_reused_tokenizer_without_the_user_defined_symbols_is_refused(tmp_path):
    """data.user_defined_symbols on a run whose tokenizer lacks them (resumed, or adopted by
    training.init_from) fails before training, naming the file."""
    from keras_transformer import config as config_lib
    from keras_transformer.run import data as run_data, train as run_train

    pairs, _ = make_splits(40, 0, seed=6)
    write_jsonl(tmp_path / "train.jsonl.gz", pairs)
    (tmp_path / "run").mkdir()
    SubwordTokenizer.train(pairs, 100, hard_vocab_limit=False).save(tmp_path / "run" / "tokenizer.model")
    config = config_lib.resolve(assignments=[f"output_dir={tmp_path / 'run'}",
                                             f"data.train={tmp_path / 'train.jsonl.gz'}",
                                             "data.user_defined_symbols=<BT> <2de>"])
    with pytest.raises(run_data.RunError,
                       match=r"run/tokenizer.model: no piece for <BT> <2de> \(data.user_defined_symbols\)"):
        run_train.train(config)
