"""The shortlist's projection onto candidate rows in the quantized copies
(`quantize_model`): int8 (per-row scales of the shared embedding, with and
without activation quantization). A list of every piece must
give exactly the plain search of the same copy; a small list only listed pieces."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt

from keras_transformer.decoding import greedy_search, shortlisted
from keras_transformer.decoding.shortlist import Shortlist
from keras_transformer.export.quantize import quantize_model

to_numpy = ops.convert_to_numpy

VOCABULARY = 40


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    model = kt.Transformer(vocabulary_size=VOCABULARY, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                           num_decoder_layers=1)
    model.build()
    return model


@pytest.mark.parametrize("mode", ["int8", "int8_weights"])  # both branches of the int8 projection
def test_quantized_copies_project_onto_the_listed_rows(mode, model):
    copy = quantize_model(model, mode)
    source = np.array([[5, 9, 14, 22, 31, 3], [7, 3, 0, 0, 0, 0], [12, 4, 6, 3, 0, 0]], "int32")
    every = Shortlist(np.tile(np.arange(VOCABULARY, dtype=np.int32), (VOCABULARY, 1)), [], VOCABULARY)
    options = dict(max_extra_length=6, min_length=3)
    plain = {k: to_numpy(v) for k, v in greedy_search(copy, source, **options).items()}
    listed = {k: to_numpy(v) for k, v in
              shortlisted.search(greedy_search, copy, every, source, multiple=1, **options).items()}
    assert np.array_equal(plain["ids"], listed["ids"]) and np.array_equal(plain["scores"], listed["scores"])
    small = Shortlist(np.full((VOCABULARY, 1), 7, np.int32), [11, 12], VOCABULARY)
    ids = to_numpy(shortlisted.search(greedy_search, copy, small, source, multiple=8, **options)["ids"])
    assert np.isin(ids, [0, 1, 2, 3, 7, 11, 12]).all() and (ids > 3).any()
