"""keras_transformer.decoding.evaluation reproduces sacreBLEU's own scores (also re-exported
by keras_transformer.decoding), and `evaluate` scores what it translates."""

import pytest
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

from keras_transformer import decoding
from keras_transformer.decoding.evaluation import compound_split_bleu, corpus_scores, evaluate, split_compounds

HYPOTHESES = [
    "Das Haus ist klein.",
    "Die Rich-Text-Datei wurde gespeichert.",
    "Der Zug kommt um halb acht an.",
    "",
    "Sie weiß, dass der E-Mail-Server läuft!",
]
REFERENCES = [
    "Das Haus ist sehr klein.",
    "Die Rich-Text-Datei ist gespeichert.",
    "Der Zug kommt um halb acht an.",
    "Guten Morgen.",
    "Sie weiß, dass der E-Mail-Server nicht läuft.",
]


def test_detokenized_bleu_and_chrf_are_sacrebleus():
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    bleu = BLEU()
    assert scores["bleu"] == pytest.approx(bleu.corpus_score(HYPOTHESES, [REFERENCES]).score, abs=1e-9)
    assert scores["bleu_signature"] == str(bleu.get_signature())
    chrf = CHRF()
    assert scores["chrf"] == pytest.approx(chrf.corpus_score(HYPOTHESES, [REFERENCES]).score, abs=1e-9)
    assert scores["chrf_signature"] == str(chrf.get_signature())


def test_split_compounds_like_perl_substitution():
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    # Non-overlapping, as perl's s{(\S)-(\S)}{...}g: the second hyphen of a-b-c stays.
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    assert split_compounds("E-Mail-Server") == "E ##AT##-##AT## Mail ##AT##-##AT## Server"
    assert split_compounds("a - b") == "a - b"


def test_compound_split_bleu_is_sacrebleu_on_tokenized_split_text():
    tokenize = sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a()
    import re

    def prepare(text):
        return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", tokenize(text))

    expected = sacrebleu.corpus_bleu(
        [prepare(h) for h in HYPOTHESES], [[prepare(r) for r in REFERENCES]],
        tokenize="none", smooth_method="none", force=True,
    ).score
    result = compound_split_bleu(HYPOTHESES, REFERENCES)
    assert result["bleu_compound_split"] == pytest.approx(expected, abs=1e-9)
    assert "compound" in result["bleu_compound_split_label"]
    # Splitting compounds credits their matching parts: the score differs from sacreBLEU's.
    assert result["bleu_compound_split"] != pytest.approx(corpus_scores(HYPOTHESES, REFERENCES)["bleu"])
    assert compound_split_bleu(REFERENCES, REFERENCES)["bleu_compound_split"] == pytest.approx(100.0)


def test_intl_bleu_signatures_and_perfect_scores():
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    intl = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], tokenize="intl").score
    assert scores["bleu_tokenized"] == pytest.approx(intl)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "tok:intl" in scores["bleu_tokenized_signature"]
    assert 0 < scores["bleu"] < 100
    perfect = corpus_scores(REFERENCES, REFERENCES)
    assert perfect["bleu"] == pytest.approx(100.0) and perfect["chrf"] == pytest.approx(100.0)


def test_misaligned_inputs_are_named():
    for score in (corpus_scores, compound_split_bleu):
        with pytest.raises(ValueError, match="5 hypotheses but 4 references"):
            score(HYPOTHESES, REFERENCES[:4])
    with pytest.raises(TypeError, match=r"references\[0\] is int"):
        compound_split_bleu(["a"], [1])
    with pytest.raises(TypeError, match=r"corpus_scores: hypotheses\[1\] is bytes"):
        corpus_scores(["a", b"b"], ["a", "b"])
    with pytest.raises(ValueError, match="evaluate: 2 sources but 1 references"):
        evaluate(None, None, ["a", "b"], ["x"], translate=lambda texts: texts)


def test_evaluate_scores_what_it_translates():
    """A stand-in translation function (upper-casing) makes the expected scores computable."""
    sources = [r.lower() for r in REFERENCES]
    result = evaluate(None, None, sources, REFERENCES, translate=lambda texts: [t.capitalize() for t in texts])
    translations = [s.capitalize() for s in sources]
    assert result["translations"] == translations
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(translations, [REFERENCES]).score)
    assert result["exact_match"] == sum(t == r for t, r in zip(translations, REFERENCES)) / len(REFERENCES)
    assert "bleu_compound_split" in result
    assert decoding.evaluate is evaluate and decoding.corpus_scores is corpus_scores


def test_perplexity_is_exp_of_the_token_mean_cross_entropy_by_hand():
    """Two batches of different sizes; padding (0) ignored; a token mean over
    all real tokens together, checked against math.log of a hand softmax."""
    import math

    import numpy as np

    from keras_transformer.decoding.evaluation import perplexity

    rng = np.random.default_rng(3)
    batches = [(rng.normal(size=(2, 3, 5)).astype("float32"), np.array([[1, 4, 0], [2, 0, 0]])),
               (rng.normal(size=(1, 4, 5)).astype("float32"), np.array([[3, 3, 1, 2]]))]

    def model(inputs, training=False):
        assert training is False
        return inputs  # the "inputs" are the logits

    nll = []
    for logits, labels in batches:
        for row, label_row in zip(logits, labels):
            for scores, label in zip(row, label_row):
                if label:
                    exps = [math.exp(float(s)) for s in scores]
                    nll.append(-math.log(exps[label] / sum(exps)))
    result = perplexity(model, batches)
    assert result["tokens"] == len(nll) == 7
    assert result["cross_entropy"] == pytest.approx(sum(nll) / 7, rel=1e-6)
    assert result["perplexity"] == pytest.approx(math.exp(sum(nll) / 7), rel=1e-6)
    # Uniform logits over V classes: perplexity V.
    uniform = [(np.zeros((1, 2, 5), "float32"), np.array([[1, 2]]))]
    assert perplexity(model, uniform)["perplexity"] == pytest.approx(5.0)
    with pytest.raises(ValueError, match="no target token"):
        perplexity(model, [(np.zeros((1, 2, 5), "float32"), np.zeros((1, 2), int))])
