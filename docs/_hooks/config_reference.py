"""MkDocs hook: writes the configuration reference from `keras_transformer.config`
into docs/configuration.md at build time, so the page cannot drift from the code.

The page holds the marker `<!-- config-reference -->`; the build replaces it with
one table per section of `SCHEMA` (key, default, allowed values, meaning) and a
table of `RUN_PRESETS`. `reference_markdown()` is what tests/tf/test_docs.py
compares with the schema.
"""

import importlib.util
from pathlib import Path

MARKER = "<!-- config-reference -->"
CONFIG = Path(__file__).resolve().parents[2] / "keras_transformer" / "config.py"


def load_config_module():
    """keras_transformer/config.py alone (standard library only): importing the package would load
    Keras and TensorFlow, which the build does not need."""
    spec = importlib.util.spec_from_file_location("_config_for_docs", CONFIG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(value):
    if value is None:
        return "none"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def _kind(spec):
    if isinstance(spec, tuple):
        return "one of " + ", ".join(f"`{choice}`" for choice in spec)
    return f"`{spec.__name__}`"


def _flatten(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def reference_markdown():
    """The generated part of the page: every key of `config.SCHEMA` and every run preset."""
    config = load_config_module()
    top = [(key, spec) for key, spec in config.SCHEMA.items() if not isinstance(spec, dict)]
    sections = [("top level", "", top)] + [
        (f"`{name}`", f"{name}.", list(spec.items()))
        for name, spec in config.SCHEMA.items() if isinstance(spec, dict)
    ]
    lines = []
    for title, prefix, entries in sections:
        lines += [f"### {title}", "", "| key | default | type | meaning |", "| --- | --- | --- | --- |"]
        for key, (default, kind, meaning) in entries:
            lines.append(f"| `{prefix}{key}` | {_cell(_default(default))} | {_cell(_kind(kind))} | {_cell(meaning)} |")
        lines.append("")
    lines += ["### Run presets (`--preset NAME`, or `preset: NAME` at the top of a file)", "",
              "| preset | sets |", "| --- | --- |"]
    for name, preset in config.RUN_PRESETS.items():
        settings = ", ".join(f"`{key}={value}`" for key, value in _flatten(preset))
        lines.append(f"| `{name}` | {_cell(settings)} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        return markdown.replace(MARKER, reference_markdown())
    return markdown
