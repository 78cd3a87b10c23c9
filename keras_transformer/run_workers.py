"""Deprecated: moved to `keras_transformer.run.workers`.

Importing this path warns (DeprecationWarning) and gives that very module,
so its names, and monkeypatching them, are the new module's. Goes in the
next release.
"""

import sys

from keras_transformer._moved import warn_moved
from keras_transformer.run import workers

warn_moved(__name__, workers.__name__)
sys.modules[__name__] = workers
