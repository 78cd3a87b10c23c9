"""Deprecated: moved to `keras_transformer.decoding.evaluation`.

Importing this path warns (DeprecationWarning) and gives that very module
(`keras_transformer.decoding` re-exports its scores too). Goes in the next
release.
"""

import sys

from keras_transformer._moved import warn_moved
from keras_transformer.decoding import evaluation

warn_moved(__name__, evaluation.__name__)
sys.modules[__name__] = evaluation
