"""The shortlist's projection onto candidate rows in the quantized copies
(`quantize_model`): int8 (per-row scales of the shared embedding), with and
without activation quantization. A small list's search must equal the same
copy's search on its full-vocabulary logits with every unlisted piece at
-inf, a reference written here without the shortlist module.

The searches run eagerly (`compile=False`): six steps of a 16-wide model
take a fraction of a second, where tracing them took seconds per search."""

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
SOURCE = np.array([[5, 9, 14, 22, 31, 3], [7, 3, 0, 0, 0, 0], [12, 4, 6, 3, 0, 0]], "int32")
OPTIONS = dict(max_extra_length=6, min_length=3, compile=False)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    # With an output bias (Marian's final_logits_bias), kept float in the int8 copies: the shortlist
    # adds its candidates' entries, the masked reference the whole vocabulary's.
    model = kt.Transformer(vocabulary_size=VOCABULARY, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                           num_decoder_layers=1, output_bias=True)
    model.build()
    model.output_bias.assign(np.random.default_rng(2).normal(size=VOCABULARY).astype("float32"))
    return model


class MaskedLogits:
    """`model` for the searches, its decoder's full-vocabulary logits (the
    projection onto every row) plus `bias`: 0 for allowed pieces, -inf for
    the rest."""

    def __init__(self, model, allowed):
        self.model = model
        bias = np.full(model.vocabulary_size, -np.inf, np.float32)
        bias[allowed] = 0.0
        self.bias = ops.convert_to_tensor(bias[None])

    def __getattr__(self, name):  # vocabulary_size, built, pad_id, ...
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def incremental_decoder(self, source_ids, **options):
        return _MaskedDecoder(self.model.incremental_decoder(source_ids, **options), self.bias)


class _MaskedDecoder:
    def __init__(self, inner, bias):
        self.inner, self.bias = inner, bias

    def __getattr__(self, name):  # initial_state, reorder, ...
        return getattr(self.inner, name)

    def step(self, state, last_tokens, step):
        logits, state = self.inner.step(state, last_tokens, step)
        return logits + self.bias, state


@pytest.mark.parametrize("mode", ["int8", "int8_weights"])  # both branches of the int8 projection
def test_quantized_copies_project_onto_the_listed_rows(mode, model):
    copy = quantize_model(model, mode)
    table = np.random.default_rng(1).integers(4, VOCABULARY, size=(VOCABULARY, 2)).astype(np.int32)
    small = Shortlist(table, [11, 12], VOCABULARY)
    listed = sorted({0, 1, 2, 3, 11, 12} | set(table[np.unique(SOURCE)].reshape(-1).tolist()))  # by hand
    ids, count = small.candidates(SOURCE, multiple=8)
    assert count == len(listed) < len(ids) < VOCABULARY  # the shortlisted search runs, padding entries included
    reference = {k: to_numpy(v) for k, v in greedy_search(MaskedLogits(copy, listed), SOURCE, **OPTIONS).items()}
    actual = {k: to_numpy(v) for k, v in
              shortlisted.search(greedy_search, copy, small, SOURCE, multiple=8, **OPTIONS).items()}
    assert np.array_equal(reference["ids"], actual["ids"])
    assert np.array_equal(reference["lengths"], actual["lengths"])
    np.testing.assert_allclose(reference["scores"], actual["scores"], rtol=1e-6, atol=1e-6)
    assert np.isin(actual["ids"], listed).all() and (actual["ids"] > 3).any()
