"""Our evaluation call reproduces what sacreBLEU itself computes."""

import pytest
import sacrebleu

from keras_transformer.evaluation import corpus_scores

HYPOTHESES = [
    "Das Haus ist klein.",
    "Ich habe einundzwanzig Äpfel gekauft.",
    "Der Zug kommt um halb acht an.",
    "",
    "Sie weiß, dass der Mann das Buch liest!",
]
REFERENCES = [
    "Das Haus ist sehr klein.",
    "Ich habe einundzwanzig Äpfel.",
    "Der Zug kommt um halb acht an.",
    "Guten Morgen.",
    "Sie weiß, dass der Mann das Buch liest.",
]


def test_scores_match_sacrebleu():
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    intl = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], tokenize="intl").score
    assert scores["bleu_tokenized"] == pytest.approx(intl)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "tok:intl" in scores["bleu_tokenized_signature"]
    assert "chrF2" in scores["chrf_signature"] or "nc:6" in scores["chrf_signature"]
    assert 0 < scores["bleu"] < 100


def test_perfect_translations_score_100():
    scores = corpus_scores(REFERENCES, REFERENCES)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)


def test_misaligned_inputs_are_named():
    with pytest.raises(ValueError, match="5 hypotheses but 4 references"):
        corpus_scores(HYPOTHESES, REFERENCES[:4])
    with pytest.raises(TypeError, match=r"hypotheses\[1\] is bytes"):
        corpus_scores(["a", b"b"], ["a", "b"])
