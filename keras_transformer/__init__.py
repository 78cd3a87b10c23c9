"""keras-transformer: the Transformer of "Attention Is All You Need" on Keras 3."""

__version__ = "0.1.0"

from keras_transformer.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    PositionwiseFeedForward,
    ScaledDotProductAttention,
    SharedEmbedding,
    SinusoidalPositionalEncoding,
)
from keras_transformer.models import PRESETS, Transformer
