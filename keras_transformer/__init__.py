"""keras-transformer: the Transformer of "Attention Is All You Need" on Keras 3.

Here: `Transformer`, the layers and the training pieces a user imports first.
Each part has its package: `layers`, `models`, `training`, `data` (corpora,
tokenizer, tf.data, the special tokens), `decoding` (searches, translation,
evaluation), `export`, `run` (a run on disk, its plots), `marian`, `hub`,
`parsing` (section 6.3), `datasets`; `config` is a run's configuration and
`cli` the `keras-transformer` command line. The other top-level modules are
private helpers the packages share, and deprecated old paths (one release).
"""

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
