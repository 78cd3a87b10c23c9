"""Decoding (greedy and beam search, scoring given translations), text translation and evaluation.

The searches are backend-agnostic (`keras.ops`); `translate` needs a tokenizer
such as `keras_transformer.data.SubwordTokenizer` (TensorFlow), and the
evaluation needs `sacrebleu`. Nothing here imports TensorFlow at import time.
"""

from keras_transformer.decoding.alignment import attention_alignments
from keras_transformer.decoding.evaluation import compound_split_bleu
from keras_transformer.decoding.evaluation import corpus_scores
from keras_transformer.decoding.evaluation import evaluate
from keras_transformer.decoding.evaluation import split_compounds
from keras_transformer.decoding.search import LENGTH_PENALTIES
from keras_transformer.decoding.search import LIMIT_RULES
from keras_transformer.decoding.search import beam_search
from keras_transformer.decoding.search import greedy_search
from keras_transformer.decoding.search import length_penalty
from keras_transformer.decoding.search import sampling_search
from keras_transformer.decoding.scoring import score_translations
from keras_transformer.decoding.step_function import StepFunction
from keras_transformer.decoding.translate import Hypothesis
from keras_transformer.decoding.translate import Translator
from keras_transformer.decoding.translate import translate

__all__ = [
    "Hypothesis",
    "LENGTH_PENALTIES",
    "LIMIT_RULES",
    "StepFunction",
    "Translator",
    "attention_alignments",
    "beam_search",
    "compound_split_bleu",
    "corpus_scores",
    "evaluate",
    "greedy_search",
    "length_penalty",
    "sampling_search",
    "score_translations",
    "split_compounds",
    "translate",
]
