"""Old import path of the checkpoint API, kept for one release.

The code lives in `checkpoint_files.py` (files, digests, verification),
`resumable.py` (`StepCheckpoint`, `TerminateOnNonFiniteLoss`,
`fit_resumable`) and `averaging.py`; import from `keras_transformer.training`.
"""

from keras_transformer.training.averaging import average_checkpoints
from keras_transformer.training.averaging import save_averaged_model
from keras_transformer.training.checkpoint_files import CorruptCheckpointError
from keras_transformer.training.checkpoint_files import NonFiniteWeightsError
from keras_transformer.training.checkpoint_files import latest_checkpoint
from keras_transformer.training.checkpoint_files import list_checkpoints
from keras_transformer.training.checkpoint_files import verify_checkpoint
from keras_transformer.training.resumable import StepCheckpoint
from keras_transformer.training.resumable import TerminateOnNonFiniteLoss
from keras_transformer.training.resumable import fit_resumable

__all__ = [
    "CorruptCheckpointError",
    "NonFiniteWeightsError",
    "StepCheckpoint",
    "TerminateOnNonFiniteLoss",
    "average_checkpoints",
    "fit_resumable",
    "latest_checkpoint",
    "list_checkpoints",
    "save_averaged_model",
    "verify_checkpoint",
]
