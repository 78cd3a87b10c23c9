"""Word alignments from cross-attention on trained tiny models of two tasks
whose true alignments are known: copying (the diagonal) and reversing (the
anti-diagonal), both from the shared reversal task (`tests/reversal_task.py`)."""

import os
import sys

import keras
import numpy as np
import pytest

from keras_transformer import Transformer
from keras_transformer.decoding import attention_alignments, greedy_search
from keras_transformer.decoding.alignment import words_alignment
from keras_transformer.training import LabelSmoothedCrossEntropy, paper_optimizer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: reversal_task
from reversal_task import BOS, EOS, PAD, VOCABULARY_SIZE, reversal_pairs  # noqa: E402


@pytest.fixture(scope="module", params=["copy", "reverse"])
def trained(request):
    reverse = request.param == "reverse"
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "tiny", vocabulary_size=VOCABULARY_SIZE, d_model=64, d_ff=128, num_heads=4,
        num_encoder_layers=2, num_decoder_layers=2, dropout=0.0,
    )
    model.compile(optimizer=paper_optimizer(64, warmup_steps=100, scale=0.3),
                  loss=LabelSmoothedCrossEntropy(label_smoothing=0.1))
    x, y = reversal_pairs(4096, seed=0, reverse=reverse)
    model.fit(x, y, batch_size=64, epochs=5, verbose=0)
    return request.param, model


def test_alignments_follow_the_task(trained):
    name, model = trained
    inputs, _ = reversal_pairs(256, seed=1, reverse=name == "reverse")
    source = inputs["source"]
    lengths = (source != PAD).sum(1) - 1  # symbols, EOS excluded
    output = keras.ops.convert_to_numpy(
        greedy_search(model, source, max_extra_length=2, bos_id=BOS, eos_id=EOS, pad_id=PAD)["ids"]
    )
    positions = keras.ops.convert_to_numpy(
        attention_alignments(model, source, output, bos_id=BOS, eos_id=EOS, pad_id=PAD)["source_positions"]
    )
    expected_links = correct_links = 0
    for row, length in enumerate(lengths):
        expected = [length - 1 - t if name == "reverse" else t for t in range(length)]
        correct_links += sum(int(positions[row, t]) == expected[t] for t in range(length))
        expected_links += length
    share = correct_links / expected_links
    print(f"\n{name}: {share:.1%} of {expected_links} links on the expected diagonal")
    assert share >= 0.9


def test_words_alignment_maps_pieces_to_words():
    # Source "▁the ▁big house" -> words 0, 1, 1 (EOS belongs to none);
    # target "▁das ▁gro ße ▁Haus" -> words 0, 1, 1, 2.
    source_word_of = [0, 1, 1, None]
    target_word_of = [0, 1, 1, 2, None]
    # Target pieces point at source pieces 0, 1, 2, 2 and EOS at the source EOS.
    assert words_alignment([0, 1, 2, 2, 3], source_word_of, target_word_of) == "0-0 1-1 1-2"
    # A word whose pieces disagree takes the majority, ties to the first source word.
    assert words_alignment([0, 0, 1, -1, -1], [0, 1], [0, 0, 0, None, None]) == "0-0"
    assert words_alignment([1, 0, -1], [0, 1], [0, 0, None]) == "0-0"


def test_bad_layer_is_named(trained):
    _, model = trained
    with pytest.raises(ValueError, match="layer"):
        attention_alignments(model, np.ones((1, 3), "int32"), np.ones((1, 3), "int32"), layer=2)
