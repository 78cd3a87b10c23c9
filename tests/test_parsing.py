"""keras_transformer.parsing: the .mrg reader, Vinyals et al.'s linear form and back,
and labelled bracket scores checked against counts worked out by hand."""

import random
from collections import Counter

import pytest

from keras_transformer import parsing
from keras_transformer.parsing import ParseError, Tree, bracket_scores, delinearize, linearize, parse_brackets


def tree(text):
    (parsed,) = parse_brackets(text)
    return parsed


MRG = """\
( (S
    (NP-SBJ-1 (NNP Pierre) (NNP Vinken) )
    (VP (MD will)
      (VP (VB join)
        (NP (DT the) (NN board) )
        (S
          (NP-SBJ (-NONE- *-1) )
          (VP (TO to)
            (VP (VB sit) )))))
    (. .) ))
( (S (NP-SBJ (PRP It)) (VP (VBZ is) (ADJP-PRD=2 (JJ good) (-NONE- *T*-3))) (. .) ))
"""


def test_read_mrg_removes_traces_function_tags_and_the_empty_top(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text(MRG, encoding="utf-8")
    first, second = parsing.read_mrg(path)
    # The inner S lost its subject: NP-SBJ held only a trace.
    assert str(first) == ("(S (NP (NNP Pierre) (NNP Vinken)) (VP (MD will) (VP (VB join) (NP (DT the) (NN board)) "
                          "(S (VP (TO to) (VP (VB sit)))))) (. .))")
    assert str(second) == "(S (NP (PRP It)) (VP (VBZ is) (ADJP (JJ good))) (. .))"
    assert first.words() == ["Pierre", "Vinken", "will", "join", "the", "board", "to", "sit", "."]


@pytest.mark.parametrize("text, message", [
    ("( (S (NP (DT the) (NN cat))\n", r"f.mrg:1: bracket opened here is never closed"),
    ("(S (NN a)))\n", r"f.mrg:1: '\)' closes nothing"),
    ("(S (NN a))\nstray\n", r"f.mrg:2: word 'stray' outside any bracket"),
    ("(S\n (NN a b))\n", r"f.mrg:2: \(NN ...\) has more than one word"),
    ("(S (NP))\n", r"f.mrg:1: empty constituent \(NP\)"),
    ("( (S (-NONE- *)) )\n", r"f.mrg: tree 1 has only empty elements"),
])
def test_read_mrg_names_the_file_and_line_of_bad_input(tmp_path, text, message):
    path = tmp_path / "f.mrg"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ParseError, match=message):
        parsing.read_mrg(path)


def test_strip_label_keeps_bracket_tags():
    assert [parsing.strip_label(x) for x in ("NP-SBJ-1", "ADJP-PRD=2", "WHNP-3", "-LRB-", "-NONE-", "PRP$")] == [
        "NP", "ADJP", "WHNP", "-LRB-", "-NONE-", "PRP$"]


def test_linearize_as_vinyals_et_al():
    gold = tree("(S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))")
    assert " ".join(linearize(gold)) == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP . )S"


GOLD = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"


def test_delinearize_inverts_linearize():
    gold = tree(GOLD)
    decoded = delinearize(linearize(gold), gold.words())
    assert decoded.status == "ok" and decoded.repairs == []
    # Same brackets; tags are XX except punctuation.
    assert str(decoded.tree) == ("(S (NP (XX The) (XX cat)) (VP (XX sat) (PP (XX on) (NP (XX the) (XX mat)))) "
                                 "(. .))")
    assert bracket_scores([gold], [decoded.tree]).f1 == 1.0


WORDS = "The cat sat on the mat .".split()


@pytest.mark.parametrize("output, expected, repair", [
    # Brackets left open at the end are closed.
    ("(S (NP XX XX )NP (VP XX (PP XX (NP XX XX .",
     "(S (NP (XX The) (XX cat)) (VP (XX sat) (PP (XX on) (NP (XX the) (XX mat) (. .)))))", "left open"),
    # A closing bracket with nothing open is dropped.
    ("(S (NP XX XX )NP (VP XX XX XX XX )VP . )S )S",
     "(S (NP (XX The) (XX cat)) (VP (XX sat) (XX on) (XX the) (XX mat)) (. .))", "no bracket is open"),
    # )VP while (NP is open inside it closes both.
    ("(S (NP XX XX )NP (VP XX (NP XX XX XX )VP . )S",
     "(S (NP (XX The) (XX cat)) (VP (XX sat) (NP (XX on) (XX the) (XX mat))) (. .))", ")VP also closed (NP"),
    # )PP with no (PP open closes the innermost bracket.
    ("(S (NP XX XX )PP (VP XX XX XX XX )VP . )S",
     "(S (NP (XX The) (XX cat)) (VP (XX sat) (XX on) (XX the) (XX mat)) (. .))", ")PP closed (NP"),
    # Too few word slots: the rest of the words go at the end of the root.
    ("(S (NP XX XX )NP (VP XX )VP )S",
     "(S (NP (XX The) (XX cat)) (VP (XX sat)) (XX on) (XX the) (XX mat) (XX .))", "attached 4 word(s)"),
    # Too many: the extra slots are dropped; so is a token that is no symbol of ours.
    ("(S (NP XX XX )NP (VP XX XX XX XX )VP . XX XX sat )S",
     "(S (NP (XX The) (XX cat)) (VP (XX sat) (XX on) (XX the) (XX mat)) (. .))", "no word left"),
    # Punctuation outside the top constituent is moved in; empty constituents go.
    ("(S (NP XX XX )NP (VP XX XX XX XX (ADJP )ADJP )VP )S .",
     "(S (NP (XX The) (XX cat)) (VP (XX sat) (XX on) (XX the) (XX mat)) (. .))", "removed empty (ADJP"),
])
def test_delinearize_repairs_unbalanced_output(output, expected, repair):
    decoded = delinearize(output, WORDS)
    assert decoded.status == "repaired"
    assert str(decoded.tree) == expected
    assert any(repair in note for note in decoded.repairs), decoded.repairs


@pytest.mark.parametrize("output, reason", [
    ("XX XX XX XX XX XX .", "no constituent"),
    ("", "no constituent"),
    ("(NP XX XX )NP (VP XX XX XX XX . )VP", "2 top-level constituents"),
])
def test_delinearize_rejects_what_is_no_tree(output, reason):
    decoded = delinearize(output, WORDS)
    assert decoded.status == "rejected" and f"rejected: {reason}" in decoded.repairs
    # The stand-in has the words and no scored bracket: recall pays, precision does not.
    assert decoded.tree.words() == WORDS
    score = bracket_scores([tree(GOLD)], [decoded.tree])
    assert (score.matched, score.gold, score.test) == (0, 5, 0)


def test_statuses_can_be_counted():
    outputs = ["(S (NP XX XX )NP (VP XX (PP XX (NP XX XX )NP )PP )VP . )S", "(S (NP XX XX", "XX"]
    counts = Counter(delinearize(output, WORDS).status for output in outputs)
    assert counts == {"ok": 1, "repaired": 1, "rejected": 1}


# Labelled bracket scores, worked by hand. Spans are counted in words after
# punctuation is removed; the root bracket counts unless it is TOP/ROOT/empty.

def test_hand_worked_scores_one_misattached_phrase():
    # gold: S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6)   -> 5 brackets ("." removed: 6 words)
    # test: S(0,6) NP(0,2) VP(2,3) PP(3,6) NP(4,6)   -> 5 brackets, VP(2,3) wrong
    # matched 4: P = 4/5, R = 4/5, F = 0.8
    test = tree("(S (NP (XX The) (XX cat)) (VP (XX sat)) (PP (XX on) (NP (XX the) (XX mat))) (. .))")
    score = bracket_scores([tree(GOLD)], [test])
    assert (score.matched, score.gold, score.test) == (4, 5, 5)
    assert score.precision == pytest.approx(0.8) and score.recall == pytest.approx(0.8)
    assert score.f1 == pytest.approx(0.8)


def test_hand_worked_scores_punctuation_is_ignored():
    # gold: S(0,2) NP(0,1) VP(1,2): "," and "." removed, 2 words left.
    # test puts the comma inside the NP: NP covers "John ," = (0,1) once the comma is gone.
    # matched 3 of 3 and 3: P = R = F = 1. Counting the comma would make NP (0,2) and VP (2,3).
    gold = tree("(S (NP (NNP John)) (, ,) (VP (VBD ran)) (. .))")
    test = tree("(S (NP (XX John) (, ,)) (VP (XX ran)) (. .))")
    score = bracket_scores([gold], [test])
    assert (score.matched, score.gold, score.test) == (3, 3, 3) and score.f1 == 1.0


def test_hand_worked_scores_root_label_and_advp_prt():
    # gold: empty root (ignored); S(0,3) NP(0,1) VP(1,3) PRT(2,3)=ADVP(2,3)  -> 4
    # test: TOP (ignored);        S(0,3) NP(0,1) VP(1,3) ADVP(2,3)           -> 4
    # matched 4: P = R = F = 1.
    gold = tree("( (S (NP (PRP He)) (VP (VBD gave) (PRT (RP up)))))")
    test = tree("(TOP (S (NP (XX He)) (VP (XX gave) (ADVP (XX up)))))")
    score = bracket_scores([gold], [test])
    assert (score.matched, score.gold, score.test) == (4, 4, 4) and score.f1 == 1.0
    # A different label on the same span does not match: ADJP(2,3) -> 3 of 4 each way.
    wrong = tree("(TOP (S (NP (XX He)) (VP (XX gave) (ADJP (XX up)))))")
    assert bracket_scores([gold], [wrong]).f1 == pytest.approx(0.75)


def test_hand_worked_scores_brackets_are_a_multiset_and_the_corpus_sums_counts():
    # gold: S(0,2) NP(0,1) NP(0,1) VP(1,2) -> 4 (a unary NP over NP: the same bracket twice)
    # test: S(0,2) NP(0,1) VP(1,2)         -> 3; one NP matches one of the two: matched 3
    # P = 3/3 = 1, R = 3/4, F = 2 * 1 * 0.75 / 1.75 = 6/7
    gold = tree("(S (NP (NP (NNS dogs))) (VP (VBP bark)))")
    test = tree("(S (NP (XX dogs)) (VP (XX bark)))")
    score = bracket_scores([gold], [test])
    assert (score.matched, score.gold, score.test) == (3, 4, 3)
    assert score.precision == 1.0 and score.recall == 0.75 and score.f1 == pytest.approx(6 / 7)
    # With the first hand-worked sentence (4 matched, 5 gold, 5 test): summed counts, not averaged scores.
    # P = 7/8, R = 7/9, F = 2 * (7/8)(7/9) / (7/8 + 7/9) = 98/119 = 14/17
    first_test = tree("(S (NP (XX The) (XX cat)) (VP (XX sat)) (PP (XX on) (NP (XX the) (XX mat))) (. .))")
    corpus = bracket_scores([tree(GOLD), gold], [first_test, test])
    assert (corpus.matched, corpus.gold, corpus.test, corpus.sentences) == (7, 9, 8, 2)
    assert corpus.f1 == pytest.approx(14 / 17)


def test_scores_refuse_different_words():
    with pytest.raises(ValueError, match="sentence 0: the test tree's words differ"):
        bracket_scores([tree(GOLD)], [tree("(S (XX The) (XX dog))")])
    with pytest.raises(ValueError, match="1 gold trees but 0 test trees"):
        bracket_scores([tree(GOLD)], [])


def random_tree(rng, words, labels=("NP", "VP", "PP", "S", "ADJP", "SBAR")):
    """A random bracketing of `words` with no punctuation, no unary chains (so no repeated
    bracket) and an S root: the trees on which set-based scorers and EVALB agree."""
    def build(span, label):
        if len(span) == 1:
            return Tree("NN", [span[0]])
        cut = rng.randrange(1, len(span))
        parts = [span[:cut], span[cut:]]
        return Tree(label, [build(part, rng.choice(labels)) for part in parts])

    return build(words, "S")


def test_scores_agree_with_pyevalb_where_its_conventions_are_evalbs():
    """PYEVALB (PyPI) matches brackets as a set and keeps punctuation and PRT, so it
    agrees with EVALB only on trees without punctuation, repeated brackets or PRT."""
    # Installed by the test extra: an outside check must run, never skip.
    from PYEVALB import parser as pyevalb
    from PYEVALB import scorer
    rng = random.Random(7)
    for _ in range(50):
        words = [f"w{i}" for i in range(rng.randrange(2, 12))]
        gold, test = random_tree(rng, words), random_tree(rng, words)
        ours = bracket_scores([gold], [test])
        theirs = scorer.Scorer().score_trees(pyevalb.create_from_bracket_string(str(gold)),
                                             pyevalb.create_from_bracket_string(str(test)))
        assert (ours.matched, ours.gold, ours.test) == (
            theirs.matched_brackets, theirs.gold_brackets, theirs.test_brackets), (str(gold), str(test))
