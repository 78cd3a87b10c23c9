"""Data for training: corpus readers, subword tokenizer, tf.data pipeline.

TensorFlow-specific (tf.data, TensorFlow Text); import it explicitly as
`keras_transformer.data`. Names load on first use, so the corpus readers
(`read_jsonl`, `load_corpus`, ...) do not import TensorFlow themselves
(under the jax and torch backends nothing else does either).
"""

import importlib

_EXPORTS = {
    "corpus": (
        "CorpusError",
        "CorpusStats",
        "PairFilter",
        "ParallelCorpus",
        "iter_lines",
        "load_corpus",
        "open_corpus",
        "read_jsonl",
        "read_text_pair",
        "read_tsv",
    ),
    "tokenizer": ("BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "SubwordTokenizer"),
    "pipeline": (
        "PipelineStats",
        "default_bucket_boundaries",
        "make_dataset",
        "make_id_dataset",
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
