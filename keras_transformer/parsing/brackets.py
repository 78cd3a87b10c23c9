"""Labelled bracket precision, recall and F1 under the conventions of EVALB's COLLINS.prm."""

from collections import Counter
from dataclasses import dataclass

from keras_transformer.parsing.trees import PUNCTUATION_TAGS

# EVALB COLLINS.prm: the root brackets that are not scored, and EQ_LABEL.
ROOT_LABELS = frozenset({"", "TOP", "ROOT"})
EQUIVALENT_LABELS = {"PRT": "ADVP"}


def labelled_brackets(tree, deleted=frozenset()):
    """The multiset of (label, start, end) of `tree`'s constituents, EVALB-style:
    word positions in `deleted` are removed first (spans count the rest), the
    root is skipped when its label is TOP, ROOT or empty, preterminals are not
    brackets, constituents covering only deleted words are dropped, and PRT
    counts as ADVP."""
    brackets = Counter()
    position = 0  # next word position in the tree
    kept = 0  # words kept before it

    def walk(node, is_root):
        nonlocal position, kept
        if node.is_preterminal:
            if position not in deleted:
                kept += 1
            position += 1
            return
        start = kept
        for child in node.children:
            walk(child, False)
        if kept > start and not (node.label in ROOT_LABELS and (is_root or node.label)):
            brackets[EQUIVALENT_LABELS.get(node.label, node.label), start, kept] += 1

    walk(tree, True)
    return brackets


@dataclass
class BracketScore:
    """Matched, gold and test bracket counts over `sentences`; precision, recall and F1 as fractions."""

    matched: int = 0
    gold: int = 0
    test: int = 0
    sentences: int = 0

    @property
    def precision(self):
        return self.matched / self.test if self.test else 0.0

    @property
    def recall(self):
        return self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self):
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0

    def __add__(self, other):
        return BracketScore(self.matched + other.matched, self.gold + other.gold, self.test + other.test,
                            self.sentences + other.sentences)

    def as_dict(self):
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1, "matched": self.matched,
                "gold": self.gold, "test": self.test, "sentences": self.sentences}


def sentence_score(gold, test, index=0):
    """The bracket counts of one sentence; the two trees must have the same words."""
    gold_words, test_words = gold.words(), test.words()
    if gold_words != test_words:
        raise ValueError(f"sentence {index}: the test tree's words differ from the gold tree's "
                         f"({len(test_words)} against {len(gold_words)}: {test_words[:8]} / {gold_words[:8]})")
    deleted = frozenset(i for i, tag in enumerate(gold.tags()) if tag in PUNCTUATION_TAGS)
    gold_brackets, test_brackets = labelled_brackets(gold, deleted), labelled_brackets(test, deleted)
    matched = sum((gold_brackets & test_brackets).values())
    return BracketScore(matched, sum(gold_brackets.values()), sum(test_brackets.values()), 1)


def bracket_scores(gold_trees, test_trees):
    """Corpus-level labelled bracket precision, recall and F1 (counts summed over sentences, as EVALB)."""
    gold_trees, test_trees = list(gold_trees), list(test_trees)
    if len(gold_trees) != len(test_trees):
        raise ValueError(f"{len(gold_trees)} gold trees but {len(test_trees)} test trees")
    total = BracketScore()
    for index, (gold, test) in enumerate(zip(gold_trees, test_trees)):
        total = total + sentence_score(gold, test, index)
    return total
