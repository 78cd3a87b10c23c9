"""Word alignments from cross-attention, under every Keras backend: the tiny
models of copying (true links: the diagonal) and reversing (the
anti-diagonal) with weights trained once under TensorFlow and kept in
tests/data/ (`alignment_models.py` writes them; eager PyTorch would take
minutes to train them). tests/tf/test_alignments_trained_afresh.py trains them afresh."""

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


class _LetterTokenizer:
    """One id per letter a..h (ids 4..11), each letter a word of its own."""

    def tokenize(self, texts):
        return [[4 + "abcdefgh".index(c) for c in text if c in "abcdefgh"] for text in texts]

    def detokenize(self, id_lists):
        return [" ".join("abcdefgh"[int(t) - 4] if 4 <= int(t) < 12 else "?" for t in ids) for ids in id_lists]

    def id_to_piece(self, token):
        return "▁" + ("abcdefgh"[token - 4] if 4 <= token < 12 else "?")


def test_alignments_of_a_hypothesis_at_the_learned_position_cap():
    # A model with 8 learned positions, whose EOS is never likely (scale 0):
    # its hypotheses run to the cap of 8 tokens without EOS. Their alignment
    # reads BOS + 8 tokens, no position beyond the table (TensorFlow raised
    # on the EOS appended past it).
    from test_search import make_model

    from keras_transformer.decoding import Translator

    model = make_model(vocabulary_size=12, eos_scale=-3.0, num_encoder_layers=1, num_decoder_layers=1,
                       positional_encoding="learned", max_length=8)
    translator = Translator(model, _LetterTokenizer(), beam_size=1, max_extra_length=20, batch_size=1)
    texts = ["abcdefg", "hg"]
    results = translator.translate(texts, return_alignments=True)
    lengths = [len(result.translation.split()) for result in results]
    assert 8 in lengths  # the fixture reaches the cap
    for text, result in zip(texts, results):
        links = [tuple(map(int, link.split("-"))) for link in result.alignment.split()]
        assert bool(links) == bool(result.translation), result  # a translation's words are linked
        assert all(0 <= i < len(text) and 0 <= j < len(result.translation.split()) for i, j in links)
