"""The Transformer's layers (paper section 3), in `keras.ops` only: they run on
the TensorFlow, JAX and PyTorch backends, and each is registered as
serializable under the package name `keras_transformer`."""

from keras_transformer.layers.attention import MultiHeadAttention, ScaledDotProductAttention
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.embeddings import (
    LearnedPositionalEmbedding,
    SharedEmbedding,
    SinusoidalPositionalEncoding,
)
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.masks import causal_mask, decoder_self_attention_mask, padding_mask
from keras_transformer.layers.residual_sublayers import ResidualSublayers

__all__ = [
    "Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "LearnedPositionalEmbedding", "MultiHeadAttention",
    "PositionwiseFeedForward", "ResidualSublayers", "ScaledDotProductAttention", "SharedEmbedding",
    "SinusoidalPositionalEncoding", "causal_mask", "decoder_self_attention_mask", "padding_mask",
]
