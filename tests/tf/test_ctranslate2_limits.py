"""The CTranslate2 export of a model with learned positions: capped at its
position table, by the one truncation rule (TensorFlow: the tokenizer).

Before, a 30-token source against a 16-position table failed the whole
batch inside the engine."""

import keras
import numpy as np
import pytest
from required_imports import required

ctranslate2 = required("ctranslate2")  # under CI=true a missing package fails the module instead of skipping it

import keras_transformer as kt  # noqa: E402
from keras_transformer.data import SubwordTokenizer  # noqa: E402
from keras_transformer.datasets.synthetic_en_de import make_splits  # noqa: E402
from keras_transformer.decoding import Translator  # noqa: E402
from test_ctranslate2 import ENGINE_THREADS  # noqa: E402
from keras_transformer.export.ctranslate2 import (  # noqa: E402
    CTranslate2Translator,
    ctranslate2_options,
    export_ctranslate2,
)


@pytest.fixture(scope="module")
def tokenizer():
    train, _ = make_splits(400, 1, seed=3)
    return SubwordTokenizer.train(train, vocabulary_size=120, hard_vocab_limit=False, seed=0)


def test_learned_positions_cap_sources_and_outputs(tokenizer, tmp_path):
    keras.utils.set_random_seed(5)
    model = kt.Transformer(vocabulary_size=tokenizer.vocabulary_size, d_model=32, num_heads=4, d_ff=64,
                           num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
                           positional_encoding="learned", max_length=16)
    model.build()
    path = export_ctranslate2(model, tokenizer, tmp_path / "ct2", max_input_length=256, max_extra_length=10)
    engine = CTranslate2Translator(path, intra_threads=ENGINE_THREADS)
    assert engine.info["search"]["max_input_length"] == 16  # capped at the table
    long_text = " ".join(["I have twenty-one apples."] * 6)
    texts = [long_text, "I have apples.", ""]
    assert len(Translator(model, tokenizer).token_ids([long_text])[0]) >= 30
    got = engine.translate(texts, beam_size=1)
    assert engine.last_truncated == [0]
    ours = Translator(model, tokenizer, beam_size=1, max_extra_length=10)
    with pytest.warns(UserWarning, match="truncated"):
        expected = ours.translate(texts)
    assert ours.last_truncated == [0] and ours.max_source_length == 16
    assert got == expected
    # Outputs end within the table too: the engine's limit is capped at 16,
    # as our search caps its own outputs.
    assert ctranslate2_options(1, 0.0, 10, source_length=16, learned_positions=16)["max_decoding_length"] == 16
    decoded = ours.decode_ids(ours.source_ids(texts[:2]))
    assert max(len(row[0][0]) for row in decoded) <= 16
    assert np.isfinite(engine.translate(texts, beam_size=2, return_scores=True)[1]).all()
