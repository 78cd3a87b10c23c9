"""Export to TensorFlow Serving: a versioned SavedModel with its tokenizer.

TensorFlow backend only; import it explicitly as `keras_transformer.export`.
Names load on first use, so `check_serving_ops` (which needs TensorFlow but
not Keras) can run on its own.
"""

import importlib

_EXPORTS = {
    "saved_model": (
        "ExportDirectoryError",
        "export_saved_model",
        "next_version",
    ),
    "opcheck": (
        "ServingOpsError",
        "TF_TEXT_OPS",
        "check_serving_ops",
        "core_tensorflow_ops",
        "list_ops",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
