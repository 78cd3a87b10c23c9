"""Data for training: corpus readers, subword tokenizer, tf.data pipeline.

TensorFlow-specific (tf.data, TensorFlow Text); import it explicitly as
`keras_transformer.data`. The corpus readers alone need no TensorFlow:
`keras_transformer.data.corpus`.
"""

from keras_transformer.data.corpus import CorpusError
from keras_transformer.data.corpus import CorpusStats
from keras_transformer.data.corpus import PairFilter
from keras_transformer.data.corpus import ParallelCorpus
from keras_transformer.data.corpus import iter_lines
from keras_transformer.data.corpus import load_corpus
from keras_transformer.data.corpus import open_corpus
from keras_transformer.data.corpus import read_jsonl
from keras_transformer.data.corpus import read_text_pair
from keras_transformer.data.corpus import read_tsv
from keras_transformer.data.pipeline import PipelineStats
from keras_transformer.data.pipeline import default_bucket_boundaries
from keras_transformer.data.pipeline import make_dataset
from keras_transformer.data.pipeline import make_id_dataset
from keras_transformer.data.tokenizer import BOS_ID
from keras_transformer.data.tokenizer import EOS_ID
from keras_transformer.data.tokenizer import PAD_ID
from keras_transformer.data.tokenizer import UNK_ID
from keras_transformer.data.tokenizer import SubwordTokenizer

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "CorpusError",
    "CorpusStats",
    "PairFilter",
    "ParallelCorpus",
    "PipelineStats",
    "SubwordTokenizer",
    "default_bucket_boundaries",
    "iter_lines",
    "load_corpus",
    "make_dataset",
    "make_id_dataset",
    "open_corpus",
    "read_jsonl",
    "read_text_pair",
    "read_tsv",
]
