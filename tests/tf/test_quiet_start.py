"""The command line starts quietly: TensorFlow's C++ log lines (`I0000 ...`,
`E0000 ...`, `cudart_stub`, absl's pre-initialisation warning) reach no user
who did not ask for them, and `--verbose` brings them back.

Each check runs the console entry point in a fresh process without
TF_CPP_MIN_LOG_LEVEL (the suite's runner sets it), as a user's shell would.
The `--verbose` runs show that the pattern matches TensorFlow's real output on
this machine, so a silent stderr is evidence, not a pattern that never matches.
"""

import os
import re
import subprocess
import sys

import pytest

from conftest import write_synthetic_corpus

# A line TensorFlow's C++ logging writes: absl's "I1126 13:52:07.6 ... file.cc:12]" form,
# the warning absl prints before it is initialised, and the CPU feature notice.
TF_LOG_LINE = re.compile(
    r"^[IWEF]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog"
    r"|cudart_stub|rebuild TensorFlow with the appropriate compiler flags",
    flags=re.M,
)


def run_cli(*arguments, cwd, extra_env=None):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "keras_transformer.cli", *arguments], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def log_lines(stderr):
    return [line for line in stderr.splitlines() if TF_LOG_LINE.search(line)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run trained for two steps by `python -m keras_transformer.cli train`, and that command's result."""
    work = write_synthetic_corpus(tmp_path_factory.mktemp("quiet"), 200, 10)
    result = run_cli(
        "train", "--output-dir", "run", "--set", "data.train=train.jsonl", "--set", "data.source_key=en",
        "--set", "data.target_key=de", "--set", "data.vocabulary_size=120", "--set", "model.preset=tiny",
        "--set", "model.d_model=16", "--set", "model.d_ff=32", "--set", "model.num_heads=2",
        "--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1",
        "--set", "training.max_steps=2", "--set", "training.tokens_per_batch=256", cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    return work, result


def test_train_and_translate_print_no_tensorflow_log_line(trained):
    work, train = trained
    assert log_lines(train.stderr) == [], train.stderr[-3000:]
    translate = run_cli("translate", "run", "--text", "I have two apples.", "--beam-size", "2", cwd=work)
    assert translate.returncode == 0, translate.stderr[-3000:]
    assert translate.stdout.strip()
    assert log_lines(translate.stderr) == [], translate.stderr


def test_verbose_brings_the_lines_back(tmp_path):
    """`--verbose` (here after the command: it is read from the arguments before argparse runs) and
    TF_CPP_MIN_LOG_LEVEL=0 set by the user (each run costs a TensorFlow start; the parser's side is
    test_every_command_accepts_verbose_on_either_side)."""
    for arguments, env in ((["plot", "no-run", "--verbose"], None), (["plot", "no-run"], {"TF_CPP_MIN_LOG_LEVEL": "0"})):
        result = run_cli(*arguments, cwd=tmp_path, extra_env=env)
        assert result.returncode == 2  # no such run: the command's own error, after TensorFlow loaded
        assert log_lines(result.stderr), (arguments, env, result.stderr)


def test_every_command_accepts_verbose_on_either_side():
    from keras_transformer import _startup, cli

    parser = cli.build_parser()
    assert parser.parse_args(["--verbose", "plot", "run"]).verbose
    assert parser.parse_args(["plot", "run", "--verbose"]).verbose
    assert not getattr(parser.parse_args(["plot", "run"]), "verbose", False)
    assert _startup.wants_verbose(["translate", "run", "--verbose"]) and not _startup.wants_verbose(["plot", "run"])
