"""Text in, text out with a SubwordTokenizer; the search's TensorFlow graph and XLA paths."""

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data import EOS_ID, PAD_ID, SubwordTokenizer
from keras_transformer.decoding import Translator, beam_search, evaluate, greedy_search, translate
from keras_transformer.decoding import search as search_module

PAIRS = [
    ("The small cat sees a dog.", "Die kleine Katze sieht einen Hund."),
    ("The big dog runs quickly.", "Der große Hund läuft schnell."),
    ("A red house is old.", "Ein rotes Haus ist alt."),
    ("The woman reads a book.", "Die Frau liest ein Buch."),
    ("The children play in the garden.", "Die Kinder spielen im Garten."),
    ("We drink water every day.", "Wir trinken jeden Tag Wasser."),
    ("The train arrives at seven.", "Der Zug kommt um sieben an."),
    ("My brother works in the old town.", "Mein Bruder arbeitet in der Altstadt."),
]
TEXTS = [
    "The cat sees the garden.",
    "",
    "We read a book every day and the children play in the old town.",
    "   ",
    "A dog.",
    "The train arrives.",
]


@pytest.fixture(scope="module")
def tokenizer():
    return SubwordTokenizer.train(PAIRS, vocabulary_size=80, hard_vocab_limit=False, seed=0)


@pytest.fixture(scope="module")
def model(tokenizer):
    keras.utils.set_random_seed(0)
    model = kt.Transformer(
        vocabulary_size=tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32,
        num_encoder_layers=1, num_decoder_layers=2,
    )
    model.build()
    return model


def test_translate_keeps_order_handles_empty_strings_and_batching(model, tokenizer):
    outputs = translate(model, tokenizer, TEXTS, beam_size=2, max_extra_length=5)
    assert isinstance(outputs, list) and len(outputs) == len(TEXTS)
    assert all(isinstance(text, str) for text in outputs)
    assert outputs[1] == "" and outputs[3] == ""
    # Batches of 2 sorted by length, or one sentence at a time: the same translations.
    assert translate(model, tokenizer, TEXTS, beam_size=2, max_extra_length=5, batch_size=2) == outputs
    alone = [translate(model, tokenizer, text, beam_size=2, max_extra_length=5) for text in TEXTS]
    assert alone == outputs
    assert translate(model, tokenizer, [], beam_size=2) == []


def test_translations_are_the_detokenized_search_output(model, tokenizer):
    texts = [t for t in TEXTS if t.strip()]
    rows = [list(tokenizer.tokenize(text).numpy()) + [EOS_ID] for text in texts]
    source = np.full((len(rows), max(map(len, rows))), PAD_ID, "int32")
    for index, row in enumerate(rows):
        source[index, : len(row)] = row
    result = beam_search(model, source, beam_size=3, alpha=0.6, max_extra_length=4)
    expected = [t.decode("utf-8") for t in tokenizer.detokenize(result["ids"]).numpy()]
    translator = Translator(model, tokenizer, beam_size=3, max_extra_length=4)
    outputs, scores = translator(texts, return_scores=True)
    assert outputs == expected
    np.testing.assert_allclose(scores, keras.ops.convert_to_numpy(result["scores"]), rtol=1e-5)
    greedy = greedy_search(model, source, max_extra_length=4)
    expected_greedy = [t.decode("utf-8") for t in tokenizer.detokenize(greedy["ids"]).numpy()]
    assert Translator(model, tokenizer, beam_size=1, max_extra_length=4)(texts) == expected_greedy


def test_translator_rejects_bad_input(model, tokenizer):
    with pytest.raises(TypeError, match=r"texts\[1\] is bytes"):
        translate(model, tokenizer, ["a", b"b"])
    with pytest.raises(ValueError, match="batch_size"):
        Translator(model, tokenizer, batch_size=0)


def graph_op_types(concrete_function):
    types = {op.type for op in concrete_function.graph.get_operations()}
    for function in concrete_function.graph.as_graph_def().library.function:
        types.update(node.op for node in function.node_def)
    return types


@pytest.mark.parametrize("search", [greedy_search, beam_search], ids=["greedy", "beam"])
def test_search_in_a_plain_graph_needs_no_xla(search, model):
    """What a SavedModel export traces: tf.function without autograph or XLA, unknown shapes."""
    function = tf.function(lambda ids: search(model, ids, max_extra_length=3), autograph=False)
    concrete = function.get_concrete_function(tf.TensorSpec((None, None), tf.int32))
    types = graph_op_types(concrete)
    assert "While" in types or "StatelessWhile" in types
    assert not [t for t in types if t.startswith("Xla")], sorted(types)
    source = tf.constant([[5, 6, 7, EOS_ID], [8, EOS_ID, 0, 0]], tf.int32)
    in_graph = concrete(source)
    compiled = search(model, source, max_extra_length=3)
    np.testing.assert_array_equal(in_graph["ids"].numpy(), keras.ops.convert_to_numpy(compiled["ids"]))


def test_blockwise_beam_search_in_a_plain_graph_and_under_xla():
    """A vocabulary large enough for the blockwise top-k: unknown shapes in a
    plain graph (the export path), and XLA, give the eager-compiled result."""
    keras.utils.set_random_seed(1)
    model = kt.Transformer(
        vocabulary_size=1031, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=1,
    )
    model.build()
    assert model.vocabulary_size >= search_module.BLOCKWISE_TOP_K_MIN_VOCABULARY
    function = tf.function(lambda ids: beam_search(model, ids, max_extra_length=3), autograph=False)
    concrete = function.get_concrete_function(tf.TensorSpec((None, None), tf.int32))
    assert not [t for t in graph_op_types(concrete) if t.startswith("Xla")]
    source = tf.constant([[5, 600, 7, EOS_ID], [1020, EOS_ID, 0, 0]], tf.int32)
    in_graph = concrete(source)
    compiled = beam_search(model, source, max_extra_length=3)
    xla = beam_search(model, source, max_extra_length=3, jit_compile=True)
    for result in (compiled, xla):
        np.testing.assert_array_equal(in_graph["ids"].numpy(), keras.ops.convert_to_numpy(result["ids"]))
        np.testing.assert_allclose(in_graph["scores"].numpy(), result["scores"].numpy(), rtol=1e-5, atol=1e-5)


def test_xla_search_equals_graph_search(model):
    source = np.array([[5, 6, 7, 9, EOS_ID], [8, EOS_ID, 0, 0, 0], [11, 12, EOS_ID, 0, 0]], "int32")
    for search in (greedy_search, beam_search):
        graph = search(model, source, max_extra_length=4)
        xla = search(model, source, max_extra_length=4, jit_compile=True)
        np.testing.assert_array_equal(xla["ids"].numpy(), graph["ids"].numpy())
        np.testing.assert_allclose(xla["scores"].numpy(), graph["scores"].numpy(), rtol=1e-5, atol=1e-5)


def test_evaluate_reports_sacrebleu_of_the_translations(model, tokenizer):
    sources = [source for source, _ in PAIRS[:4]]
    references = [target for _, target in PAIRS[:4]]
    scores = evaluate(model, tokenizer, sources, references, beam_size=2, max_extra_length=4)
    assert scores["translations"] == translate(model, tokenizer, sources, beam_size=2, max_extra_length=4)
    expected = sacrebleu.corpus_bleu(scores["translations"], [references])
    assert scores["bleu"] == pytest.approx(expected.score, abs=1e-9)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(scores["translations"], [references]).score)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "bleu_compound_split" in scores
    with pytest.raises(ValueError, match="4 sources but 3 references"):
        evaluate(model, tokenizer, sources, references[:3])
