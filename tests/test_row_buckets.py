"""Static row buckets (`phases.static_row_buckets`): under static shapes (XLA
on TensorFlow, JAX) a search drops the sentences that are done between
phases too, each later phase decoding the smallest of a few row buckets
that holds those not done (the XLA SavedModel's `xla_phase_buckets`).

The outputs must be those of the whole batch decoded in every phase, and a
smaller bucket must really run: the selections are recorded as the search
runs (eagerly on TensorFlow, where only the branch taken runs; by a JAX
debug callback inside the compiled search, which fires only in the branch
taken). PyTorch drops exactly the done sentences anyway (test_compaction.py).
"""

import keras
import numpy as np
import pytest

from keras_transformer.decoding import beam_search, greedy_search, phases
from keras_transformer.models import incremental
from test_search import EXTRA, as_numpy, draw_weights, make_model, make_sources

static_shapes = pytest.mark.skipif(keras.backend.backend() == "torch",
                                   reason="PyTorch drops exactly the done sentences (test_compaction.py)")
LENGTHS = (1, 8, 3, 6, 2, 7, 4, 5)  # limits 5 .. 12 with EXTRA = 4


@pytest.fixture(scope="module")
def model():
    return make_model(vocabulary_size=9, num_encoder_layers=1, num_decoder_layers=1)


@pytest.fixture
def selected(monkeypatch):
    """The sizes of the row buckets the searches ran later phases in, as they ran; the ladder shrunk to 2, 4, 8."""
    sizes = []
    select = incremental.IncrementalDecoder.select

    def recording_select(self, sentences):
        if keras.backend.backend() == "jax":
            import jax

            jax.debug.callback(lambda: sizes.append(int(sentences.shape[0])))
        else:
            sizes.append(int(sentences.shape[0]))  # eager: the branch taken only
        return select(self, sentences)

    monkeypatch.setattr(incremental.IncrementalDecoder, "select", recording_select)
    monkeypatch.setattr(phases, "PHASE_CAPACITIES", (2, 4, 8))
    return sizes


SEARCHES = {
    "beam n-best": lambda m, s, **o: beam_search(m, s, beam_size=3, alpha=0.6, max_extra_length=EXTRA,
                                                 return_all_beams=True, **o),
    "greedy": lambda m, s, **o: greedy_search(m, s, max_extra_length=EXTRA, **o),
}


def static_search(search, model, source):
    # TensorFlow: the XLA layout run eagerly (only the branch taken runs); JAX: compiled.
    options = dict(jit_compile=True, compile=False) if keras.backend.backend() == "tensorflow" else {}
    return as_numpy(SEARCHES[search](model, source, **options))


@static_shapes
@pytest.mark.parametrize("search", list(SEARCHES))
def test_row_buckets_change_no_output_and_smaller_ones_run(search, model, selected):
    source = make_sources(vocabulary_size=9, lengths=LENGTHS, seed=4)
    draw_weights(model, seed=8, eos_scale=2.0)
    whole = static_search(search, model, source)
    assert selected == []  # without buckets every phase decodes the whole batch
    with phases.static_row_buckets(3):
        bucketed = static_search(search, model, source)
    # A bucket of half or a quarter of the 8 sentences ran (not only traced).
    assert selected and set(selected) <= {4, 2} and min(selected) < len(LENGTHS), selected
    for key in whole:
        np.testing.assert_allclose(bucketed[key], whole[key], rtol=1e-6, atol=1e-6, err_msg=key)
    lengths = whole["lengths"].reshape(len(LENGTHS), -1)[:, 0]
    assert len(set(lengths.tolist())) > 2, lengths  # the sentences finished at different steps


def test_the_bucket_is_the_smallest_that_holds_the_sentences_not_done():
    sizes = [8, 4, 2]
    chosen = [int(keras.ops.convert_to_numpy(phases.row_bucket(going_on, sizes))) for going_on in range(9)]
    assert chosen == [2, 2, 2, 1, 1, 0, 0, 0, 0]


def test_bad_bucket_counts_are_refused():
    for count in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match="`count` must be an int >= 1"):
            with phases.static_row_buckets(count):
                pass
