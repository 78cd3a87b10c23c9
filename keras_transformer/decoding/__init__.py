"""Decoding (greedy and beam search), text translation and evaluation.

The searches are backend-agnostic (`keras.ops`); `translate` needs a tokenizer
such as `keras_transformer.data.SubwordTokenizer` (TensorFlow), and the
evaluation needs `sacrebleu`. Nothing here imports TensorFlow at import time.
"""

from keras_transformer.decoding.search import beam_search
from keras_transformer.decoding.search import greedy_search
from keras_transformer.decoding.search import length_penalty

__all__ = [
    "beam_search",
    "greedy_search",
    "length_penalty",
]
