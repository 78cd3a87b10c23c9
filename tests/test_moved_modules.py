"""Top-level modules that moved into subpackages (the run modules to `keras_transformer.run`, the
special tokens to `data`, ...): their old paths still import, for one release, with a
DeprecationWarning that names the importing line, and give the new objects; nothing of ours imports
an old path (pyproject.toml also turns the warning into an error under pytest)."""

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# old top-level module: its new home, under keras_transformer
MOVED = {"run_data": "run.data", "run_workers": "run.workers", "run_translation": "run.translate",
         "run_shortlist": "run.shortlist", "trained_run": "run.trained", "stages": "run.stages",
         "special_tokens": "data.special_tokens", "evaluation": "decoding.evaluation",
         "plots": "run.plots", "cli_commands": "cli.commands"}
OLD_PATHS = {f"keras_transformer.{name}" for name in [*MOVED, "runs"]}


def import_afresh(old):
    """Imports `old` as a user's file would (its module body runs again); returns (module, warnings).

    Leaves no trace: a later import of the old path anywhere in this process runs its body again (and
    so fails under pytest's filter), as `from keras_transformer import NAME` would not find it imported."""
    import keras_transformer

    name = old.rpartition(".")[2]
    before = sys.modules.pop(old, None), keras_transformer.__dict__.pop(name, None)
    namespace = {}
    try:
        with pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} is deprecated: it moved to ") as caught:
            exec(compile(f"import {old} as module", "users_file.py", "exec"), namespace)
    finally:
        for mapping, value, key in ((sys.modules, before[0], old), (keras_transformer.__dict__, before[1], name)):
            mapping.pop(key, None)
            if value is not None:
                mapping[key] = value
    return namespace["module"], [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_is_its_new_module_under_the_old_path(old):
    new = importlib.import_module(f"keras_transformer.{MOVED[old]}")
    module, caught = import_afresh(f"keras_transformer.{old}")
    assert module is new  # its names, and monkeypatching them, are the new module's
    assert [(w.filename, w.lineno) for w in caught] == [("users_file.py", 1)]
    assert f"moved to {new.__name__};" in str(caught[0].message)


def test_runs_gives_its_names_from_their_new_modules():
    from keras_transformer.run import data, train, trained, translate

    runs, caught = import_afresh("keras_transformer.runs")
    assert [(w.filename, w.lineno) for w in caught] == [("users_file.py", 1)]
    homes = {train: ["train", "build_model", "compile_model", "run_boundaries", "CHECKPOINT_DIR"],
             data: ["RunError", "CONFIG_FILE", "MODEL_FILE", "TOKENIZER_FILE", "MARIAN_TOKENIZER_DIR", "prepare",
                    "prepared_dir", "read_pairs", "bucket_boundaries"],
             trained: ["load_run", "load_model", "load_tokenizer", "evaluate", "validation_perplexity", "export",
                       "export_ctranslate2"],
             translate: ["make_translator", "translate_texts", "with_target_language"]}
    for module, names in homes.items():
        for name in names:
            assert getattr(runs, name) is getattr(module, name), name
    assert runs._read_pairs is data.read_pairs


# Any import line naming an old module (`from keras_transformer.plots import ...` too): only the files
# with one are parsed.
OLD_NAMES = "|".join(name.split(".")[1] for name in sorted(OLD_PATHS))
MENTION = re.compile(rf"^[ \t]*(?:from|import)\b[^\n]*\b({OLD_NAMES})\b", re.M)


def old_imports(path):
    """(line, old module path) of every import of an old path in the file at `path`."""
    text = path.read_text(encoding="utf-8")
    if not MENTION.search(text):
        return []
    found = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name in OLD_PATHS]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in names if name in OLD_PATHS]
    return found


def test_nothing_of_ours_imports_an_old_path():
    shims = {ROOT / "keras_transformer" / f"{name}.py" for name in [*MOVED, "runs"]}
    files = [path for folder in ("keras_transformer", "tests", "recipes", "benchmarks")
             for path in sorted((ROOT / folder).rglob("*.py"))
             if path not in shims and path != Path(__file__).resolve()]
    assert len(files) > 200 and ROOT / "keras_transformer" / "cli" / "commands.py" in files
    found = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in files for line, name in old_imports(path)]
    assert not found, found


def test_an_old_import_is_found(tmp_path):
    source = tmp_path / "user.py"
    source.write_text("import os\nfrom keras_transformer import runs, config\n\ndef f():\n"
                      "    import keras_transformer.stages\n    from keras_transformer.run_data import RunError\n")
    assert old_imports(source) == [(2, "keras_transformer.runs"), (5, "keras_transformer.stages"),
                                   (6, "keras_transformer.run_data")]
    only = tmp_path / "only.py"  # its one old import names the module before `import`
    only.write_text("x = 1\nfrom keras_transformer.evaluation import corpus_scores\n")
    assert old_imports(only) == [(2, "keras_transformer.evaluation")]
