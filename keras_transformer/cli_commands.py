"""Deprecated: moved to `keras_transformer.cli.commands`.

Importing this path warns (DeprecationWarning) and gives that very module.
Goes in the next release.
"""

import sys

from keras_transformer._moved import warn_moved
from keras_transformer.cli import commands

warn_moved(__name__, commands.__name__)
sys.modules[__name__] = commands
