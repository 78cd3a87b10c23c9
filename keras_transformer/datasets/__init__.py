"""Data sets that ship with the package (generated here, nothing downloaded).

`synthetic_en_de`: the English→German corpus of the quickstart recipe.
"""

import importlib

__all__ = ["generate_pairs", "make_splits", "synthetic_en_de", "write_jsonl"]


def __getattr__(name):
    # Lazy, so that `python -m keras_transformer.datasets.synthetic_en_de`
    # does not find its module already imported by the package.
    if name == "synthetic_en_de":
        return importlib.import_module(f"{__name__}.synthetic_en_de")
    if name in ("generate_pairs", "make_splits", "write_jsonl"):
        return getattr(importlib.import_module(f"{__name__}.synthetic_en_de"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
