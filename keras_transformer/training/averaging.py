"""Checkpoint averaging (paper, section 6.1): the element-wise mean of the
model weights of the last N checkpoints (5 for base, 20 for big)."""

import glob
import os
import re
import shutil
import tempfile
import warnings
import zipfile

import h5py
import numpy as np

from keras_transformer.training.checkpoint_files import list_checkpoints
from keras_transformer.training.checkpoint_files import verify_checkpoint
from keras_transformer.training.checkpoint_files import write_digest


def _resolve_checkpoints(checkpoints, last_n):
    if isinstance(checkpoints, (str, os.PathLike)) and os.path.isdir(checkpoints):
        directory = str(checkpoints)
        paths = [path for _, path in list_checkpoints(directory)]
        if not paths:  # other naming: order by the last number in the name
            candidates = glob.glob(os.path.join(directory, "*.weights.h5")) + glob.glob(
                os.path.join(directory, "*.keras")
            )

            def order(path):
                numbers = re.findall(r"\d+", os.path.basename(path))
                return (int(numbers[-1]) if numbers else -1, os.path.getmtime(path))

            paths = sorted(candidates, key=order)
        if not paths:
            raise FileNotFoundError(
                f"average_checkpoints: no *.weights.h5 or *.keras files in {directory}."
            )
    elif isinstance(checkpoints, (str, os.PathLike)):
        raise FileNotFoundError(f"average_checkpoints: {checkpoints} is not a directory.")
    else:
        paths = [str(path) for path in checkpoints]
        if not paths:
            raise ValueError("average_checkpoints: no checkpoint paths given.")
    if last_n is not None:
        if last_n < 1:
            raise ValueError(f"average_checkpoints: `last_n` must be >= 1, got {last_n}.")
        paths = paths[-last_n:]
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"average_checkpoints: {path} does not exist.")
        if not (path.endswith(".weights.h5") or path.endswith(".keras")):
            raise ValueError(
                f"average_checkpoints: {path} is neither a .weights.h5 nor a .keras file."
            )
    return paths


def _read_datasets(h5_file):
    arrays = {}

    def visit(name, item):
        if isinstance(item, h5py.Dataset):
            arrays[name] = item[()]

    h5_file.visititems(visit)
    return arrays


def _read_weights_file(path, scratch):
    if path.endswith(".weights.h5"):
        verify_checkpoint(path)  # a clear error naming a damaged file
    if path.endswith(".keras"):
        with zipfile.ZipFile(path) as archive:
            archive.extract("model.weights.h5", scratch)
        path = os.path.join(scratch, "model.weights.h5")
    with h5py.File(path, "r") as handle:
        return _read_datasets(handle)


def _is_averaged(name, array):
    # Model floating-point variables are averaged; optimizer state, integer
    # counters and seed states are taken from the newest checkpoint.
    return not name.startswith("optimizer/") and np.issubdtype(array.dtype, np.floating)


def average_checkpoints(checkpoints, last_n=5, output_path=None):
    """Element-wise mean of the model weights of the last `last_n` checkpoints.

    Args:
        checkpoints: a directory (its `ckpt-<step>.weights.h5` files, else its
            `*.weights.h5` / `*.keras` files ordered by the last number in
            their names) or a list of paths, oldest first.
        last_n: how many of the newest to average (None: all). The paper
            averages the last 5 (base, written every 10 minutes) or 20 (big).
        output_path: if given, a `.weights.h5` file to write: the newest
            checkpoint with its model weights replaced by the averages, ready
            for `model.load_weights(output_path)`.

    Returns:
        `{variable path in the weights file: np.ndarray}` for the averaged
        (floating-point model) variables. Averages are computed in float64 and
        cast back to each variable's dtype.
    """
    paths = _resolve_checkpoints(checkpoints, last_n)
    scratch = tempfile.mkdtemp(prefix="average-checkpoints-")
    try:
        sums = None
        for path in paths:
            arrays = _read_weights_file(path, scratch)
            arrays = {k: v for k, v in arrays.items() if _is_averaged(k, v)}
            if sums is None:
                sums = {k: v.astype(np.float64) for k, v in arrays.items()}
                dtypes = {k: v.dtype for k, v in arrays.items()}
                first = path
            elif arrays.keys() != sums.keys() or any(
                arrays[k].shape != sums[k].shape for k in sums
            ):
                raise ValueError(
                    f"average_checkpoints: {path} does not hold the same variables "
                    f"as {first}; only checkpoints of one model can be averaged."
                )
            else:
                for key, value in arrays.items():
                    sums[key] += value
        averages = {k: (v / len(paths)).astype(dtypes[k]) for k, v in sums.items()}
        if output_path is not None:
            output_path = str(output_path)
            if not output_path.endswith(".weights.h5"):
                raise ValueError(
                    "average_checkpoints: `output_path` must end in .weights.h5, "
                    f"got {output_path}."
                )
            newest = paths[-1]
            if newest.endswith(".keras"):
                with zipfile.ZipFile(newest) as archive:
                    archive.extract("model.weights.h5", scratch)
                newest = os.path.join(scratch, "model.weights.h5")
            temporary_path = output_path + ".tmp"
            shutil.copyfile(newest, temporary_path)
            with h5py.File(temporary_path, "r+") as handle:
                for key, value in averages.items():
                    handle[key][...] = value
            write_digest(temporary_path)  # the copied file's digest is stale
            os.replace(temporary_path, output_path)
        return averages
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def save_averaged_model(model, checkpoints, output_path, last_n=5):
    """Loads the average of the last `last_n` checkpoints into `model` and
    saves it to `output_path` (`.keras`: whole model, `.weights.h5`: weights).

    `model` must be built like the model that wrote the checkpoints; its
    optimizer state (if any) is left as it is.
    """
    output_path = str(output_path)
    if not (output_path.endswith(".keras") or output_path.endswith(".weights.h5")):
        raise ValueError(
            f"save_averaged_model: `output_path` must end in .keras or .weights.h5, got {output_path}."
        )
    scratch = tempfile.mkdtemp(prefix="average-checkpoints-")
    try:
        averaged = os.path.join(scratch, "averaged.weights.h5")
        average_checkpoints(checkpoints, last_n=last_n, output_path=averaged)
        with h5py.File(averaged, "a") as handle:
            # The model weights are averaged; the newest checkpoint's optimizer
            # moments do not belong to them, so the model keeps its own.
            if "optimizer" in handle:
                del handle["optimizer"]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
            model.load_weights(averaged)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if output_path.endswith(".keras"):
        model.save(output_path)
    else:
        model.save_weights(output_path)
    return model
