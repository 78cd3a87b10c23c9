"""Training objective, optimiser, schedule and checkpoints (backend-agnostic).

`keras_transformer.training.distribute` (MirroredStrategy helpers) is
TensorFlow-only and is not imported here.
"""

from keras_transformer.training.averaging import average_checkpoints
from keras_transformer.training.averaging import save_averaged_model
from keras_transformer.training.checkpoint_files import CorruptCheckpointError
from keras_transformer.training.checkpoint_files import NonFiniteWeightsError
from keras_transformer.training.checkpoint_files import latest_checkpoint
from keras_transformer.training.checkpoint_files import list_checkpoints
from keras_transformer.training.checkpoint_files import verify_checkpoint
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.optimizers import TransformerAdam
from keras_transformer.training.optimizers import paper_optimizer
from keras_transformer.training.resumable import StepCheckpoint
from keras_transformer.training.resumable import TerminateOnNonFiniteLoss
from keras_transformer.training.resumable import fit_resumable
from keras_transformer.training.schedule import NoamSchedule
