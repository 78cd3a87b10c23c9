"""Data for training: corpus readers, subword tokenizer, tf.data pipeline.

TensorFlow-specific (tf.data, TensorFlow Text); import it explicitly as
`keras_transformer.data`. Names load on first use, so the corpus readers
(`read_jsonl`, `load_corpus`, ...) do not import TensorFlow themselves
(under the jax and torch backends nothing else does either).

`special_tokens` (the ids and pieces of pad, unk, bos and eos) is plain
constants, imported by every part of the package from the layers up: it
lives here, beside the tokenizer whose vocabulary it fixes, and importing
it imports no TensorFlow.
"""

from keras_transformer._tensorflow import lazy_exports

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
    "special_tokens": ("BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID"),
    "tokenizer": ("SubwordTokenizer",),
    "pipeline": (
        "PipelineStats",
        "make_dataset",
        "make_id_dataset",
    ),
    "bucketing": ("default_bucket_boundaries",),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
