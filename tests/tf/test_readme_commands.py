"""Every shell command in README.md and in the documentation (docs/*.md, in
the site's order) runs here, in a scratch directory, or is listed in NOT_RUN
with the reason; a command in a ```bash block that this test does not know
fails it, so neither can gain a command nobody runs.

A command runs with the documents' words, followed by options the test
appends: `--set` overrides that shrink the job (a smaller model, a few
steps) for training commands and recipes, `--beam-size 2` for `evaluate`,
`--print-config` for a first run of the `--preset` command. The one word
replaced is the corpus path of the `recipes/parallel_text` command
(../shared/data, which tests must not need, becomes a generated corpus in the
same format). `keras-transformer` commands run in process through `cli.main`,
in the order the documents give them (README.md first; a command that two
documents repeat runs once), loading each run once while its files are
unchanged (run_memo.py), `python` commands as subprocesses. The data around
them is small: the quickstart recipe on 300 generated pairs instead of 30,000
(one trained run that every command continues), and the small input files the
decoding examples name, written first.
"""

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from keras_transformer import cli
from run_memo import runs_loaded_once  # noqa: F401  (a fixture)
from test_quiet_start import TF_LOG_LINE
from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def documents():
    """README.md, then the site's pages in the order of mkdocs.yml's nav."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    pages = [page for entry in nav for page in entry.values()]
    return [README] + [ROOT / "docs" / page for page in pages]

NOT_RUN = {
    "make test": "it is CI itself (.ci/run)",
    "pip install": "what `make test` does before the tests (the Makefile installs .[test,docs])",
    "mkdocs serve": "a server that runs until stopped; tests/tf/test_docs.py builds the same site with "
                    "`mkdocs build --strict`",
    "KERAS_BACKEND=": "the benchmarks run for minutes to hours each; tests/test_benchmark_report.py and "
                      "tests/tf/test_benchmark_contenders.py test their parts",
    "python benchmarks/report.py": "rewrites the committed tables in place; the --check run below renders the same "
                                   "text and compares it",
    "make quickstart": "test_make_quickstart_runs_the_recipe checks it runs recipes/quickstart/run.py, run below",
    "docker run": "no TensorFlow Serving binary or docker daemon in CI; tests/tf/test_export.py runs the stand-ins",
    "curl": "needs the TensorFlow Serving server above",
    "tensorflow_model_server": "no TensorFlow Serving binary in CI; tests/tf/test_serving_docs.py checks every flag "
                               "of these lines against TF Serving 2.20.0's main.cc and runs the request bodies "
                               "against an export in process",
    "TF_ENABLE_ONEDNN_OPTS=1 tensorflow_model_server": "as tensorflow_model_server above, with TensorFlow's oneDNN "
                                                       "switch in its environment: tests/tf/test_cpu_notes.py checks "
                                                       "that the variable turns oneDNN on in TensorFlow",
    "TF_CONFIG=": "needs two hosts; tests/tf/test_cli_workers.py runs `keras-transformer train` as two workers on "
                  "localhost, tests/tf/test_multi_worker.py the Python API",
    # Three (two) trainings each: a second run here would add about a minute.
    "python recipes/back_translation/run.py": "tests/tf/test_recipes_workflow.py runs these very words in process, "
                                              "on generated corpora, shrunk with --set",
    "python recipes/fine_tuning/run.py": "tests/tf/test_recipes_workflow.py runs these very words in process, "
                                         "on generated corpora, shrunk with --set",
    "python recipes/opus_mt/run.py": "tests/tf/test_opus_mt_recipe.py runs these very words in process, on a "
                                     "tiny random MarianMT folder and a generated corpus, shrunk with --set",
}

# Appended to every training command: a small model, a few steps.
SHRINK = [
    "model.d_model=32", "model.d_ff=64", "model.num_heads=2",
    "model.num_encoder_layers=1", "model.num_decoder_layers=1",
    "data.vocabulary_size=150", "training.tokens_per_batch=512",
    "training.save_every_steps=1", "decoding.max_extra_length=8", "decoding.batch_size=64",
]


def readme_commands():
    """The ```bash commands of README.md and of the docs, continuation lines joined, comments dropped."""
    commands = []
    for document in documents():
        for block in re.findall(r"```bash\n(.*?)```", document.read_text(encoding="utf-8"), flags=re.S):
            for command in block.replace("\\\n", " ").splitlines():
                words = shlex.split(command, comments=True)
                if words:
                    commands.append(words)
    return commands


def readme_yaml(name):
    """The ```yaml block of README.md or the docs whose first line is `# NAME ...`."""
    for document in documents():
        for block in re.findall(r"```yaml\n(.*?)```", document.read_text(encoding="utf-8"), flags=re.S):
            if block.startswith(f"# {name}"):
                return block
    raise AssertionError(f"no ```yaml block starting with '# {name}' in README.md or docs/")


def with_settings(words, settings):
    return words + [token for setting in settings for token in ("--set", setting)]


def run_script(words, cwd):
    """Runs a documented `python ...` command as a user's shell would (no TF_CPP_MIN_LOG_LEVEL, which the
    suite's runner sets): it must succeed and print none of TensorFlow's C++ log lines."""
    assert words[0] == "python", words
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, *words[1:]], cwd=cwd, capture_output=True, text=True,
                            env=dict(env, KERAS_BACKEND="tensorflow"), timeout=900)
    assert result.returncode == 0, f"{shlex.join(words)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    noise = [line for line in (result.stdout + result.stderr).splitlines() if TF_LOG_LINE.search(line)]
    assert not noise, f"{shlex.join(words)} printed TensorFlow's C++ log lines: {noise}"
    return result.stdout


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A scratch working directory with the repository's recipes, as a user's checkout has them."""
    work = tmp_path_factory.mktemp("readme")
    (work / "recipes").symlink_to(ROOT / "recipes")
    return work


def test_every_readme_command_is_known():
    known = ("keras-transformer", "python recipes/parallel_text/run.py", "python benchmarks/report.py --check",
             *NOT_RUN)
    commands = [" ".join(words) for words in readme_commands()]
    assert commands, "README.md and docs/ have no ```bash block"
    unknown = [command for command in commands if not command.startswith(known)]
    assert not unknown, f"commands of README.md or docs/ that no test runs: {unknown}"
    assert len(documents()) > 5 and all(document.is_file() for document in documents())


def test_documented_report_check_passes():
    """`python benchmarks/report.py --check`, as benchmarks.md gives it: the committed figures are the records'."""
    words = next(w for w in readme_commands() if w[:3] == ["python", "benchmarks/report.py", "--check"])
    result = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_make_quickstart_runs_the_recipe():
    rule = re.search(r"^quickstart:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), flags=re.M)
    assert rule and "recipes/quickstart/run.py" in rule.group(1)


@pytest.fixture(scope="module")
def quickstart(workspace):
    """`python recipes/quickstart/run.py` (what `make quickstart` runs), on 300 generated pairs."""
    words = ["python", "recipes/quickstart/run.py", "--train-pairs", "300", "--test-pairs", "8"]
    output = run_script(with_settings(words, SHRINK + ["training.max_steps=3"]), workspace)
    return output


def test_quickstart_recipe_trains_evaluates_exports_and_serves(workspace, quickstart):
    run = workspace / "runs" / "quickstart"
    assert (run / "model.keras").is_file() and (run / "tokenizer.model").is_file()
    assert re.search(r"held-out \(8 sentences, beam 4\): BLEU [\d.]+, chrF [\d.]+, exact match", quickstart)
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in quickstart  # sacreBLEU signature
    assert (run / "export" / "translator" / "1" / "saved_model.pb").is_file()
    # The four example sentences went through the exported model.
    assert quickstart.count("  ->  ") == 4


def test_readme_cli_commands(workspace, quickstart, monkeypatch, runs_loaded_once):
    monkeypatch.chdir(workspace)
    # The user's own files that the decoding examples name.
    (workspace / "sources.en").write_text("I have two apples.\nThe train arrives at eight.\n", encoding="utf-8")
    (workspace / "translations.de").write_text("Ich habe zwei Äpfel.\nDer Zug kommt um acht an.\n",
                                               encoding="utf-8")
    (workspace / "prefixes.de").write_text("Ich\n\n", encoding="utf-8")
    ran, seen = [], set()
    for words in readme_commands():
        if words[0] != "keras-transformer" or tuple(words) in seen:
            continue  # a command that README.md and a page both give runs once
        seen.add(tuple(words))
        argv = words[1:]
        if argv[0] in ("train", "prepare") and "--preset" in argv:
            continue  # test_readme_preset_command
        if argv[0] == "train":
            # The quickstart ran 3 steps; this resumes the run and trains 3 more.
            argv = with_settings(argv, SHRINK + ["training.max_steps=6"])
        elif argv[0] == "evaluate":
            argv = argv + ["--beam-size", "2"]
        assert cli.main(argv) == 0, shlex.join(words)
        ran.append(argv[0])
    assert {"train", "evaluate", "translate", "score", "export", "average-checkpoints", "attention"} <= set(ran)

    run = workspace / "runs" / "quickstart"
    steps = sorted(int(p.name.split("-")[1].split(".")[0]) for p in (run / "checkpoints").glob("ckpt-*"))
    assert steps[-1] == 6  # resumed from step 3, not restarted
    result = json.loads((run / "eval.json").read_text())
    assert result["sentences"] == 8
    assert (workspace / "averaged.keras").is_file()
    assert (workspace / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    exports = {tuple(w) for w in readme_commands() if w[:2] == ["keras-transformer", "export"] and "--base-dir" in w}
    versions = sorted((p.name for p in (workspace / "models" / "translator").iterdir()), key=int)
    # One version per distinct export command (plain, and the serving page's --jit-compile): each took the next
    # free number, none overwrote another.
    assert len(exports) >= 2 and versions == [str(i) for i in range(1, len(exports) + 1)]
    assert (run / "export" / "ctranslate2-int8" / "model.bin").is_file()


def test_readme_preset_command(workspace, quickstart, monkeypatch, capsys):
    """`keras-transformer train --preset wmt14-base --config my_data.yaml` with the README's my_data.yaml:
    the paper's settings resolve, then a run with a smaller model trains on a small corpus."""
    monkeypatch.chdir(workspace)
    my_data = readme_yaml("my_data.yaml")
    (workspace / "my_data.yaml").write_text(my_data)
    files = yaml.safe_load(my_data)["data"]
    train, test = make_splits(200, 10, seed=1)
    for key, pairs in (("train", train), ("valid", test), ("test", test)):
        path = workspace / files[key]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{en}\t{de}\n" for en, de in pairs), encoding="utf-8")
    words = next(w for w in readme_commands() if w[:2] == ["keras-transformer", "train"] and "--preset" in w)
    prepare = next(w for w in readme_commands() if w[:2] == ["keras-transformer", "prepare"])
    assert prepare[2:] == words[2:]  # the large-corpora page prepares what the training page trains on
    assert cli.main(with_settings(prepare[1:], SHRINK)) == 0
    assert (workspace / "runs" / "my_data" / "prepared" / "v1" / "manifest.json").is_file()

    capsys.readouterr()
    assert cli.main(words[1:] + ["--print-config"]) == 0
    paper = yaml.safe_load(capsys.readouterr().out)
    assert paper["model"]["preset"] == "base" and paper["data"]["vocabulary_size"] == 37000
    assert paper["training"]["warmup_steps"] == 4000 and paper["training"]["average_last"] == 5
    assert paper["data"]["train"] == files["train"] and paper["output_dir"] == "runs/my_data"

    assert cli.main(with_settings(words[1:], SHRINK + ["training.max_steps=2"])) == 0
    assert "prepared in" in capsys.readouterr().out  # the data prepared above, not prepared again
    config = json.loads((workspace / "runs" / "my_data" / "config.json").read_text())
    assert config["data"]["tokenizer_model_type"] == "bpe" and config["training"]["warmup_steps"] == 4000
    assert sorted(p.name for p in (workspace / "runs" / "my_data" / "checkpoints").glob("ckpt-*")) == [
        "ckpt-000000001.weights.h5", "ckpt-000000002.weights.h5"]
    assert (workspace / "runs" / "my_data" / "model.keras").is_file()


def test_readme_parallel_text_command(workspace, quickstart):
    """The DDTP command, on a generated corpus in the same format instead of ../shared/data."""
    words = next(w for w in readme_commands() if w[:2] == ["python", "recipes/parallel_text/run.py"])
    corpus = workspace / "corpus.jsonl.gz"
    pairs, _ = make_splits(2000, 0, seed=2)  # 1000 test (as the command says), 500 valid, 500 train
    write_jsonl(corpus, pairs)
    words = [str(corpus) if word.endswith("ddtp_en_de.jsonl.gz") else word for word in words]
    output = run_script(with_settings(words, SHRINK + ["training.max_steps=2", "decoding.beam_size=1"]), workspace)
    assert re.search(r"BLEU [\d.]+", output)
    splits = workspace / "runs" / "ddtp_en_de" / "data"
    assert sum(1 for _ in gzip.open(next(splits.glob("test*")), "rt")) == 1000
