"""Word alignments from cross-attention, under every Keras backend: the tiny
models of copying (true links: the diagonal) and reversing (the
anti-diagonal) with weights trained once under TensorFlow and kept in
tests/data/ (`alignment_models.py` writes them; eager PyTorch would take
minutes to train them). tests/tf/test_alignments.py trains them afresh."""

import numpy as np
import pytest
from alignment_models import TASKS, diagonal_shares, load

from keras_transformer.decoding import attention_alignments
from keras_transformer.decoding.alignment import words_alignment


@pytest.fixture(scope="module", params=TASKS)
def trained(request):
    task = request.param
    model = load(task)
    return task, model, diagonal_shares(model, task)


def test_alignments_follow_the_task(trained):
    task, _, shares = trained
    assert shares[task] >= 0.9
    # The measure can fail: the other task's diagonal holds few of the links.
    assert shares["copy" if task == "reverse" else "reverse"] < 0.5


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
    _, model, _ = trained
    with pytest.raises(ValueError, match="layer"):
        attention_alignments(model, np.ones((1, 3), "int32"), np.ones((1, 3), "int32"), layer=2)
