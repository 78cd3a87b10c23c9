"""Deprecated: moved to `keras_transformer.data.special_tokens`.

Importing this path warns (DeprecationWarning) and gives that very module.
Goes in the next release.
"""

import sys

from keras_transformer._moved import warn_moved
from keras_transformer.data import special_tokens

warn_moved(__name__, special_tokens.__name__)
sys.modules[__name__] = special_tokens
