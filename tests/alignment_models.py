"""The two tiny Transformers whose cross-attention the alignment tests read:
trained on copying (true links: the diagonal) and on reversing (the
anti-diagonal) from the shared reversal task (`reversal_task.py`).

Training them takes minutes of eager PyTorch on CPU (about a second a step),
so the backend-agnostic test (tests/test_alignments.py) loads weights
trained once under TensorFlow and kept in tests/data/; the TensorFlow test
(tests/tf/test_alignments_trained_afresh.py) trains them afresh with `train`. After a
change of the model's variables, rewrite the files with

    KERAS_BACKEND=tensorflow python tests/alignment_models.py
"""

import os
import sys

import keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reversal_task import BOS, EOS, PAD, VOCABULARY_SIZE, reversal_pairs  # noqa: E402

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.decoding import attention_alignments, greedy_search  # noqa: E402
from keras_transformer.training import LabelSmoothedCrossEntropy, paper_optimizer  # noqa: E402

TASKS = ("copy", "reverse")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def build():
    return Transformer.from_preset(
        "tiny", vocabulary_size=VOCABULARY_SIZE, d_model=64, d_ff=128, num_heads=4,
        num_encoder_layers=2, num_decoder_layers=2, dropout=0.0,
    )


def train(task):
    """A model trained on `task` ("copy" or "reverse"): 5 epochs of 64 steps."""
    keras.utils.set_random_seed(0)
    model = build()
    model.compile(optimizer=paper_optimizer(64, warmup_steps=100, scale=0.3),
                  loss=LabelSmoothedCrossEntropy(label_smoothing=0.1))
    x, y = reversal_pairs(4096, seed=0, reverse=task == "reverse")
    model.fit(x, y, batch_size=64, epochs=5, verbose=0)
    return model


def weights_path(task):
    return os.path.join(DATA, f"alignment-{task}.weights.h5")


def load(task):
    """The model trained on `task`, from its weights in tests/data/."""
    model = build()
    model.load_weights(weights_path(task))
    return model


def diagonal_shares(model, task):
    """Greedy outputs for 256 held-out pairs of `task` and their alignments: the
    share of links (EOS excluded) on the diagonal and on the anti-diagonal."""
    inputs, _ = reversal_pairs(256, seed=1, reverse=task == "reverse")
    source = inputs["source"]
    lengths = (source != PAD).sum(1) - 1  # symbols, EOS excluded
    output = keras.ops.convert_to_numpy(
        greedy_search(model, source, max_extra_length=2, bos_id=BOS, eos_id=EOS, pad_id=PAD)["ids"]
    )
    positions = keras.ops.convert_to_numpy(
        attention_alignments(model, source, output, bos_id=BOS, eos_id=EOS, pad_id=PAD)["source_positions"]
    )
    on = {"copy": 0, "reverse": 0}
    for row, length in enumerate(lengths):
        for t in range(length):
            on["copy"] += int(positions[row, t]) == t
            on["reverse"] += int(positions[row, t]) == length - 1 - t
    shares = {name: count / lengths.sum() for name, count in on.items()}
    print(f"\n[{keras.backend.backend()}] {task} model: {shares['copy']:.1%} of {lengths.sum()} links on the "
          f"diagonal, {shares['reverse']:.1%} on the anti-diagonal")
    return shares


if __name__ == "__main__":
    os.makedirs(DATA, exist_ok=True)
    for name in TASKS:
        model = build()  # not compiled: the file holds the model's variables, no optimizer state
        model.set_weights(train(name).get_weights())
        model.save_weights(weights_path(name))
        print(f"wrote {weights_path(name)} ({os.path.getsize(weights_path(name)):,} bytes)")
