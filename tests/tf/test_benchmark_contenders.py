"""The benchmarks' like-for-like KerasHub contender is our model's size, exactly."""

import sys
from pathlib import Path

import numpy as np

from required_imports import required  # noqa: E402

required("keras_hub")  # under CI=true a failed import fails the run

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import keras_transformer as kt  # noqa: E402
from benchmarks import train_throughput  # noqa: E402

SMALL = dict(vocab=300, d_model=32, layers=2, heads=2, d_ff=64, dropout=0.1)


def test_tied_keras_hub_model_has_our_parameter_count_and_one_embedding(monkeypatch):
    monkeypatch.setattr(train_throughput, "CONFIG", SMALL)
    ours = kt.Transformer.from_preset(
        "tiny", vocabulary_size=SMALL["vocab"], d_model=SMALL["d_model"], num_heads=SMALL["heads"],
        d_ff=SMALL["d_ff"], num_encoder_layers=SMALL["layers"], num_decoder_layers=SMALL["layers"],
        dropout=SMALL["dropout"],
    )
    theirs = train_throughput.build_keras_hub_tied()
    assert theirs.count_params() == ours.count_params()
    # One (vocabulary, d_model) matrix, serving source, target and output (tied, no output bias).
    tables = [w for w in theirs.weights if tuple(w.shape) == (SMALL["vocab"], SMALL["d_model"])]
    assert len(tables) == 1
    assert not [w for w in theirs.weights if tuple(w.shape) == (SMALL["vocab"],)]
    # It runs: logits over the vocabulary for every target position.
    source = np.array([[5, 6, 7, 3, 0]], "int32")
    target = np.array([[2, 8, 9, 0]], "int32")
    logits = theirs({"source": source, "target": target})
    assert tuple(logits.shape) == (1, 4, SMALL["vocab"])
