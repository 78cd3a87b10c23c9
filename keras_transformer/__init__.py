"""keras-transformer: the Transformer of "Attention Is All You Need" on Keras 3."""

__version__ = "0.1.0"

from keras_transformer import _startup

_startup.prepare()


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
from keras_transformer.training.schedule import NoamSchedule
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.optimizers import paper_optimizer
from keras_transformer.training import average_checkpoints, fit_resumable

# Last: the KerasHub classes (keras_transformer.hub) need the names above.
from keras_transformer import _keras_hub_hook

_keras_hub_hook.install()
