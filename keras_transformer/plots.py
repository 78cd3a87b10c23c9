"""Deprecated: moved to `keras_transformer.run.plots`.

Importing this path warns (DeprecationWarning) and gives that very module.
Goes in the next release.
"""

import sys

from keras_transformer._moved import warn_moved
from keras_transformer.run import plots

warn_moved(__name__, plots.__name__)
sys.modules[__name__] = plots
