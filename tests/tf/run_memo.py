"""`run.trained.load_run` once per run and test module, for the modules that run many
`keras-transformer` commands in one process (test_cli.py, test_readme_commands.py).

A user's command is its own process: it loads the run and traces its search
afresh. In process, loading the same unchanged files again for each command
only repeats that work: searches are compiled once per model object and search
configuration (keras_transformer/decoding/compiled.py), so every fresh model
retraces a search already traced, 3-7 s a command here. What these tests check
is what each command does with the run (its options, its output), not the
loading of the same files again. The first command that loads a run still goes
through the real `load_run`, and a run whose files changed since (a resumed
training rewrites model.keras) is loaded again: the memo is keyed by the run
directory and each run file's inode, size and modification time.

Only the commands that use the model they load go through
`cli.commands._load_run` (translate, score, attention); evaluate, export and
shortlist load their own copy (keras_transformer/run/trained.py and
run/shortlist.py call `load_run` itself), so an export that quantizes its model
cannot change the model the next command translates with. Each caller gets its own copy of the config.
"""

import copy
import os

import pytest

from keras_transformer.cli import commands as cli_commands

RUN_FILES = ("model.keras", "tokenizer.model", "config.json")


def _identity(run_dir):
    directory = os.path.abspath(run_dir)
    stats = []
    for name in RUN_FILES:
        try:
            stat = os.stat(os.path.join(directory, name))
        except FileNotFoundError:
            stats.append(None)
        else:
            stats.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return directory, tuple(stats)


@pytest.fixture(scope="module")
def runs_loaded_once():
    """Patches `cli.commands._load_run` for the module; yields {identity: (model, tokenizer, config)} of the
    runs loaded."""
    load, loaded = cli_commands._load_run, {}

    def load_once(output_dir):
        key = _identity(output_dir)
        if key not in loaded:
            loaded[key] = load(output_dir)
        model, tokenizer, config = loaded[key]
        return model, tokenizer, copy.deepcopy(config)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli_commands, "_load_run", load_once)
        yield loaded
