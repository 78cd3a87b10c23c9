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
    result = beam_search(model, source, beam_size=4, alpha=0.6, max_extra_length=4)
    expected = [t.decode("utf-8") for t in tokenizer.detokenize(result["ids"]).numpy()]
    translator = Translator(model, tokenizer, beam_size=4, max_extra_length=4)
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
    # Sampling options fail when the translator is built, not at its first search.
    for name, value in [("temperature", -0.5), ("temperature", 0.0), ("top_p", 0.0), ("top_p", 1.2),
                        ("top_k", -1), ("seed", -1)]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            Translator(model, tokenizer, search="sampling", **{name: value})
        with pytest.raises(ValueError, match=f"`{name}`"):
            translate(model, tokenizer, [], search="sampling", **{name: value})


def test_the_translate_function_reaches_every_translate_option(model, tokenizer):
    """`translate(...)` is `Translator(...).translate(...)` in one call: the
    call's options (scores, n-best lists, prefixes, alignments) go through."""
    translator = Translator(model, tokenizer, beam_size=4, max_extra_length=5)
    texts = [t for t in TEXTS if t.strip()]
    options = dict(beam_size=4, max_extra_length=5)
    assert translate(model, tokenizer, texts, return_scores=True, **options) == translator.translate(
        texts, return_scores=True)
    assert translate(model, tokenizer, texts, n_best=2, **options) == translator.translate(texts, n_best=2)
    prefixes = ["Die"] * len(texts)
    assert translate(model, tokenizer, texts, prefixes=prefixes, **options) == translator.translate(
        texts, prefixes=prefixes)
    aligned = translate(model, tokenizer, texts, return_alignments=True, **options)
    assert aligned == translator.translate(texts, return_alignments=True)
    assert all(isinstance(h, kt.decoding.Hypothesis) and h.alignment for h in aligned)


def graph_op_types(concrete_function):
    types = {op.type for op in concrete_function.graph.get_operations()}
    for function in concrete_function.graph.as_graph_def().library.function:
        types.update(node.op for node in function.node_def)
    return types


@pytest.mark.parametrize("search", [greedy_search, beam_search], ids=["greedy", "beam"])
def test_search_in_a_plain_graph_needs_no_xla(search, model):
    """What a SavedModel export traces: tf.function without autograph or XLA, unknown shapes."""
    function = tf.function(lambda ids: search(model, ids, max_extra_length=4), autograph=False)
    concrete = function.get_concrete_function(tf.TensorSpec((None, None), tf.int32))
    types = graph_op_types(concrete)
    assert "While" in types or "StatelessWhile" in types
    assert not [t for t in types if t.startswith("Xla")], sorted(types)
    source = tf.constant([[5, 6, 7, EOS_ID], [8, EOS_ID, 0, 0]], tf.int32)
    in_graph = concrete(source)
    compiled = search(model, source, max_extra_length=4)
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
    scores = evaluate(model, tokenizer, sources, references, beam_size=2, max_extra_length=5)
    assert scores["translations"] == translate(model, tokenizer, sources, beam_size=2, max_extra_length=5)
    expected = sacrebleu.corpus_bleu(scores["translations"], [references])
    assert scores["bleu"] == pytest.approx(expected.score, abs=1e-9)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(scores["translations"], [references]).score)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "bleu_compound_split" in scores
    with pytest.raises(ValueError, match="4 sources but 3 references"):
        evaluate(model, tokenizer, sources, references[:3])


# ---------------------------------------------------------------------------
# The translator's toolkit through `Translator`


def test_n_best_lists_are_sorted_and_start_with_the_translation(model, tokenizer):
    translator = Translator(model, tokenizer, beam_size=4, max_extra_length=5)
    best = translator.translate(TEXTS)
    lists = translator.translate(TEXTS, n_best=3)
    for text, first, hypotheses in zip(TEXTS, best, lists):
        if not text.strip():
            assert hypotheses == [kt.decoding.Hypothesis("", 0.0, 0.0)]
            continue
        assert len(hypotheses) == 3
        assert hypotheses[0].translation == first
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
    with pytest.raises(ValueError, match="n_best.*beam_size >= 5"):
        translator.translate(TEXTS, n_best=5)
    with pytest.raises(ValueError, match="n_best"):
        translator.translate(TEXTS, n_best=0)


def test_scores_of_own_translations_and_bad_pairs(model, tokenizer):
    translator = Translator(model, tokenizer, beam_size=4, max_extra_length=5)
    texts = [t for t in TEXTS if t.strip()] + [p for p, _ in PAIRS]
    hypotheses = translator.translate(texts, n_best=1)
    scored = translator.score(texts, [h[0].translation for h in hypotheses], per_token=True)
    for hypothesis, result in zip(hypotheses, scored):
        assert len(result["token_log_probs"]) == result["tokens"]
        np.testing.assert_allclose(sum(result["token_log_probs"]), result["log_prob"], rtol=1e-5, atol=1e-5)
    # Rows known to qualify: the search's own output ended with EOS (a row
    # cut at its limit has no EOS term to score). This model's EOS is made
    # likelier (the shared model's outputs all run to the limit), so that
    # most rows end. There, forced decoding gives the search's log-probability
    # and length-penalised score: on the ids for every finished row, and
    # through Translator.score where the text tokenizes back to the same ids.
    keras.utils.set_random_seed(0)
    ending = kt.Transformer(vocabulary_size=tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32,
                            num_encoder_layers=1, num_decoder_layers=2)
    ending.build()
    ending.set_weights(model.get_weights())
    embeddings = keras.ops.convert_to_numpy(ending.target_embedding.embeddings).copy()
    embeddings[EOS_ID] *= 3.0
    ending.target_embedding.embeddings.assign(embeddings)
    translator = Translator(ending, tokenizer, beam_size=4, max_extra_length=5)
    source = translator._padded(range(len(texts)), translator.source_ids(texts), 1)
    result = beam_search(ending, source, beam_size=4, alpha=0.6, max_extra_length=5)
    ids, lengths, scores, log_probs = (keras.ops.convert_to_numpy(result[key])
                                       for key in ("ids", "lengths", "scores", "log_probs"))
    finished = [row for row in range(len(texts)) if lengths[row] and ids[row, lengths[row] - 1] == EOS_ID]
    assert len(finished) >= 5, finished  # enough rows qualify to mean something
    width = max(int(lengths[row]) - 1 for row in finished) + 1
    targets = np.full((len(finished), width), PAD_ID, "int32")
    for position, row in enumerate(finished):
        targets[position, : lengths[row] - 1] = ids[row, : lengths[row] - 1]
    forced = kt.decoding.score_translations(ending, source[finished], targets, alpha=0.6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(forced["log_probs"]), log_probs[finished],
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(forced["scores"]), scores[finished], rtol=1e-4, atol=1e-4)
    translations = [tokenizer.detokenize([targets[i][targets[i] != PAD_ID].tolist()]).numpy()[0].decode()
                    for i in range(len(finished))]
    round_trips = [i for i, text in enumerate(translations)
                   if translator.token_ids([text])[0] == targets[i][targets[i] != PAD_ID].tolist()]
    assert round_trips  # at least one row reaches Translator.score
    own = translator.score([texts[finished[i]] for i in round_trips], [translations[i] for i in round_trips])
    rows = [finished[i] for i in round_trips]
    np.testing.assert_allclose([r["log_prob"] for r in own], log_probs[rows], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose([r["score"] for r in own], scores[rows], rtol=1e-4, atol=1e-4)
    assert [r["tokens"] for r in own] == lengths[rows].tolist()
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        translator.score(["a", "b"], ["x"])
    with pytest.raises(TypeError, match=r"targets\[0\]"):
        translator.score(["a"], [3])


def test_prefixes_start_the_translation(model, tokenizer):
    translator = Translator(model, tokenizer, beam_size=2, max_extra_length=5)
    prefixes = ["Die Katze", None, "Wir", "", "Ein", "Der Zug"]
    outputs = translator.translate(TEXTS, prefixes=prefixes)
    for text, prefix, output in zip(TEXTS, prefixes, outputs):
        if text.strip() and prefix:
            assert output.startswith(prefix), (prefix, output)
    unforced = translator.translate(TEXTS)
    assert outputs[1] == unforced[1] and outputs[3] == unforced[3]
    with pytest.raises(ValueError, match="1 prefixes for 6 texts"):
        translator.translate(TEXTS, prefixes=["Die"])


def test_texts_without_tokens_translate_to_empty(model, tokenizer):
    texts = ["\ufeff", "\u200b", "\x01", "", "  ", "A dog."]
    assert all(tokens == [] for tokens in Translator(model, tokenizer).token_ids(texts[:5]))
    outputs = Translator(model, tokenizer, beam_size=2, max_extra_length=5).translate(texts)
    assert outputs[:5] == [""] * 5 and outputs[5]


def test_long_sources_are_truncated_with_a_warning(model, tokenizer):
    short, long_text = "A dog.", "We read a book every day and the children play in the old town."
    limit = len(Translator(model, tokenizer).token_ids([short])[0]) + 1  # the short text just fits
    translator = Translator(model, tokenizer, beam_size=2, max_extra_length=5, max_source_length=limit)
    with pytest.warns(UserWarning, match=rf"1 of 4 sources are longer than max_source_length={limit}.*texts\[2\]"):
        outputs = translator.translate(["", short, long_text, "  "])
    assert translator.last_truncated == [2]
    cut = tokenizer.detokenize([translator.token_ids([long_text])[0][: limit - 1]]).numpy()[0].decode()
    assert outputs[2] == translator.translate(cut)


def test_sampling_and_repeat_blocking_through_the_translator(model, tokenizer):
    texts = [t for t in TEXTS if t.strip()] * 3
    sampler = Translator(model, tokenizer, search="sampling", seed=5, max_extra_length=6, batch_size=4)
    first, again = sampler.translate(texts), sampler.translate(texts)
    assert first == again
    assert len(set(first)) > len(set(texts))  # the same text samples differently in a batch
    blocked = Translator(model, tokenizer, beam_size=2, max_extra_length=6, no_repeat_ngram_size=1)
    for tokens, _, _ in (row[0] for row in blocked.decode_ids(blocked.source_ids(texts))):
        assert len(tokens) == len(set(tokens))


def test_alignments_are_pharaoh_links_over_words(model, tokenizer):
    translator = Translator(model, tokenizer, beam_size=2, max_extra_length=5)
    results = translator.translate(TEXTS, return_alignments=True)
    for text, result in zip(TEXTS, results):
        if not text.strip():
            assert result.alignment == ""
            continue
        links = [tuple(map(int, link.split("-"))) for link in result.alignment.split()]
        assert links, result
        target_words = len(result.translation.split())
        assert all(0 <= i < len(text.split()) and 0 <= j < max(target_words, 1) for i, j in links)
        assert len({j for _, j in links}) == len(links)  # one link per target word
