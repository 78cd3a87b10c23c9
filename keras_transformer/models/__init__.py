"""The Transformer model (paper section 3, Table 3 sizes) and its one step API
of incremental decoding (`models/incremental.py`)."""

from keras_transformer.models.presets import PRESETS
from keras_transformer.models.transformer import Transformer

__all__ = ["PRESETS", "Transformer"]
