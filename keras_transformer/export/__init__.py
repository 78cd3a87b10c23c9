"""Export to TensorFlow Serving: a versioned SavedModel with its tokenizer.

TensorFlow backend only; import it explicitly as `keras_transformer.export`.
Names load on first use, so `check_serving_ops` (which needs TensorFlow but
not Keras) can run on its own.
"""

from keras_transformer._tensorflow import lazy_exports

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
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
