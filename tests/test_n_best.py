"""n-best lists of distinct texts (backend-agnostic: run under tensorflow,
jax and torch), checked against `beam_search(return_all_beams=True)`.

A tokenizer where ids 6 and 7 both spell "x" gives hypotheses that differ
in ids and detokenize alike, as two SentencePiece segmentations do.
"""

import numpy as np

from conftest import to_numpy
from keras_transformer.decoding import Translator, beam_search
from test_combined_options import VOCABULARY, bigram_model, bigram_table

PAD, BOS, EOS = 0, 2, 3
PIECES = {1: "?", 4: "a", 5: "b", 6: "x", 7: "x", 8: "c", 9: "d", 10: "e", 11: "f"}


class PieceTokenizer:
    """One id per character; ids 6 and 7 both detokenize to "x"."""

    ids = {"a": 4, "b": 5, "x": 6, "c": 8, "d": 9, "e": 10, "f": 11}

    def tokenize(self, texts):
        return [[self.ids.get(c, 1) for c in text if not c.isspace()] for text in texts]

    def detokenize(self, id_lists):
        return ["".join(PIECES.get(int(t), "?") for t in ids) for ids in id_lists]


def twin_model(seed):
    table = bigram_table(seed, eos_weight=0.5)
    table[:, 7] = table[:, 6] - 0.05  # 7 nearly as likely as 6, everywhere
    table[7] = table[6]  # and followed alike
    return bigram_model(table)


TEXTS = ["abc", "d", "fxa", "bb"]


def raw_beams(model, texts, beam_size):
    """Per text, the finished hypotheses of beam_search(return_all_beams=True): (text, score), best first."""
    translator = Translator(model, PieceTokenizer(), beam_size=beam_size, max_extra_length=4)
    sources = translator.source_ids(texts)
    width = max(len(s) for s in sources)
    ids = np.array([s + [PAD] * (width - len(s)) for s in sources], "int32")
    result = beam_search(model, ids, beam_size=beam_size, alpha=0.6, max_extra_length=4, return_all_beams=True)
    tokens, scores, lengths = (to_numpy(result[key]) for key in ("ids", "scores", "lengths"))
    rows = []
    for row in range(len(texts)):
        hypotheses = []
        for k in range(beam_size):
            if np.isfinite(scores[row, k]):
                body = [int(t) for t in tokens[row, k, : lengths[row, k]] if t != EOS]
                hypotheses.append((PieceTokenizer().detokenize([body])[0], float(scores[row, k])))
        rows.append(hypotheses)
    return rows


def test_n_best_holds_distinct_texts_and_raw_keeps_every_hypothesis():
    duplicates, widened = 0, 0
    for seed in range(3):
        model = twin_model(seed)
        translator = Translator(model, PieceTokenizer(), beam_size=4, max_extra_length=4)
        raw = translator.translate(TEXTS, n_best=4, distinct=False)
        distinct = translator.translate(TEXTS, n_best=4)
        expected_raw = raw_beams(model, TEXTS, 4)
        wider = {size: raw_beams(model, TEXTS, size) for size in (8, 16)}
        for text, got_raw, got, beams in zip(TEXTS, raw, distinct, expected_raw):
            # Raw: the search's finished hypotheses as they are.
            assert [h.translation for h in got_raw] == [t for t, _ in beams]
            np.testing.assert_allclose([h.score for h in got_raw], [s for _, s in beams], rtol=1e-5)
            texts = [t for t, _ in beams]
            duplicates += len(set(texts)) < len(texts)
            # Distinct: each text once, at its best-scored hypothesis's score.
            expected = {}
            for t, s in beams:
                expected.setdefault(t, s)
            for size in (8, 16):
                if len(expected) >= 4:
                    break
                widened += 1
                for t, s in wider[size][TEXTS.index(text)]:
                    if len(expected) < 4:
                        expected.setdefault(t, s)
            translations = [h.translation for h in got]
            assert len(set(translations)) == len(translations) == min(4, len(expected))
            assert translations[0] == texts[0] == translator.translate(text)
            assert {h.translation: round(h.score, 4) for h in got} == \
                {t: round(s, 4) for t, s in list(expected.items())[:4]}
            scores = [h.score for h in got[1:]]
            assert scores == sorted(scores, reverse=True)
    assert duplicates > 0 and widened > 0, (duplicates, widened)  # the cases the rule is for occurred
