"""A SavedModel exported with a shortlist (`export_saved_model(shortlist=...)`,
the plain variant) gives the text `Translator` gives with the same shortlist,
its n-best signature the same hypotheses, and it passes the serving-ops check."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data import SubwordTokenizer
from keras_transformer.decoding import Translator
from keras_transformer.decoding.shortlist import Shortlist
from keras_transformer.export import export_saved_model
from keras_transformer.run_shortlist import training_id_pairs

PAIRS = [("the red car", "das rote Auto"), ("the blue car", "das blaue Auto"), ("one house", "ein Haus"),
         ("two houses", "zwei Häuser"), ("I read the book", "ich lese das Buch"),
         ("we read the book", "wir lesen das Buch"), ("the train arrives", "der Zug kommt an")]
TEXTS = ["the red house", "we read", "two cars arrive", "the book"]


def test_saved_model_with_a_shortlist_gives_translators_text(tmp_path):
    tokenizer = SubwordTokenizer.train(PAIRS * 3, vocabulary_size=60, hard_vocab_limit=False, seed=0)
    keras.utils.set_random_seed(1)
    size = tokenizer.vocabulary_size
    model = kt.Transformer(vocabulary_size=size, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                           num_decoder_layers=1)
    model.build()
    shortlist = Shortlist.build(training_id_pairs(tokenizer, PAIRS), size, size, per_source=2, frequent=3)
    options = dict(beam_size=2, max_extra_length=5)
    translator = Translator(model, tokenizer, shortlist=shortlist, **options)
    ids, _ = shortlist.candidates(translator.source_ids(TEXTS))
    assert len(ids) < size  # the shortlisted search runs
    expected = translator.translate(TEXTS)
    assert expected != Translator(model, tokenizer, **options).translate(TEXTS)  # the list matters here
    export_dir = export_saved_model(model, tokenizer, tmp_path, shortlist=shortlist, warmup_rows=1,
                                    max_input_length=16, **options)
    signatures = tf.saved_model.load(export_dir).signatures
    served = signatures["serving_default"](text=tf.constant(TEXTS))["translations"].numpy()
    assert [t.decode("utf-8") for t in served] == expected
    n_best = signatures["translate_n_best"](text=tf.constant(TEXTS))["translations"].numpy()
    hypotheses = translator.translate(TEXTS, n_best=2, distinct=False)
    for row, kept in zip(n_best, hypotheses):
        assert [t.decode("utf-8") for t in row[: len(kept)]] == [h.translation for h in kept]
    with pytest.raises(ValueError, match="plain variant only"):
        export_saved_model(model, tokenizer, tmp_path, shortlist=shortlist, jit_compile=True, **options)
    with pytest.raises(ValueError, match="source vocabulary of 5 ids"):
        export_saved_model(model, tokenizer, tmp_path, shortlist=Shortlist(np.zeros((5, 1), np.int32), [], size))
