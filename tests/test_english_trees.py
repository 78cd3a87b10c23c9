"""keras_transformer.datasets.english_trees: well-formed trees, linearisable and
recoverable, the same for a seed, and held-out sentences kept out of training."""

from keras_transformer import parsing
from keras_transformer.datasets import english_trees


def test_trees_are_the_same_for_a_seed_and_round_trip_through_the_linear_form():
    trees = english_trees.generate_trees(300, seed=5)
    assert [str(t) for t in trees] == [str(t) for t in english_trees.generate_trees(300, seed=5)]
    assert [str(t) for t in trees] != [str(t) for t in english_trees.generate_trees(300, seed=6)]
    labels = set()
    for tree in trees:
        assert tree.label == "S" and tree.words()[-1] == "."
        decoded = parsing.delinearize(parsing.linearize(tree), tree.words())
        assert decoded.status == "ok"
        assert parsing.bracket_scores([tree], [decoded.tree]).f1 == 1.0
        labels |= set(parsing.labelled_brackets(tree))
    # The grammar's constituents all occur.
    assert {label for label, _, _ in labels} == {"S", "NP", "VP", "PP", "SBAR", "ADJP"}


def test_splits_hold_out_unseen_sentences():
    train, test = english_trees.make_splits(200, 20, seed=1)
    assert len(train) == 200 and len(test) == 20
    assert not {" ".join(t.words()) for t in test} & {" ".join(t.words()) for t in train}


def test_records_carry_sentence_linear_form_and_tree():
    (tree,) = english_trees.generate_trees(1, seed=2)
    record = parsing.tree_record(tree)
    assert record["en"] == " ".join(tree.words())
    assert record["tree"] == " ".join(parsing.linearize(tree))
    assert parsing.parse_brackets(record["ptb"]) == [tree]
