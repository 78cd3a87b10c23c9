"""Old import path of the evaluation API, kept for one release.

The code lives in `keras_transformer/evaluation.py`; import from
`keras_transformer.evaluation` (or `keras_transformer.decoding`, which
re-exports it).
"""

import warnings

from keras_transformer.evaluation import COMPOUND_SPLIT_LABEL
from keras_transformer.evaluation import compound_split_bleu
from keras_transformer.evaluation import corpus_scores
from keras_transformer.evaluation import evaluate
from keras_transformer.evaluation import perplexity
from keras_transformer.evaluation import split_compounds

__all__ = ["COMPOUND_SPLIT_LABEL", "compound_split_bleu", "corpus_scores", "evaluate", "perplexity", "split_compounds"]

warnings.warn(
    "keras_transformer.decoding.evaluation is deprecated and will be removed in the next release; "
    "import from keras_transformer.evaluation instead.",
    DeprecationWarning,
    stacklevel=2,
)
