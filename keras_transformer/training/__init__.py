"""Training objective, optimiser, schedule and checkpoints (backend-agnostic).

`keras_transformer.training.distribute` (MirroredStrategy helpers) is
TensorFlow-only and is not imported here.
"""

from keras_transformer.training.checkpoints import CorruptCheckpointError
from keras_transformer.training.checkpoints import NonFiniteWeightsError
from keras_transformer.training.checkpoints import StepCheckpoint
from keras_transformer.training.checkpoints import TerminateOnNonFiniteLoss
from keras_transformer.training.checkpoints import average_checkpoints
from keras_transformer.training.checkpoints import fit_resumable
from keras_transformer.training.checkpoints import latest_checkpoint
from keras_transformer.training.checkpoints import list_checkpoints
from keras_transformer.training.checkpoints import save_averaged_model
from keras_transformer.training.checkpoints import verify_checkpoint
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.optimizers import TransformerAdam
from keras_transformer.training.optimizers import paper_optimizer
from keras_transformer.training.schedule import NoamSchedule
