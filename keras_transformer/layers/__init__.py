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
