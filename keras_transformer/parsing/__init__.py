"""Constituency parsing as translation (paper, section 6.3). Pure Python."""

from keras_transformer.parsing.trees import (  # noqa: F401
    EMPTY_ELEMENT, EQUIVALENT_LABELS, OK, POS_SYMBOL, PUNCTUATION_TAGS, REJECTED, REPAIRED, ROOT_LABELS, BracketScore,
    Decoded, ParseError, Tree, bracket_scores, clean_tree, delinearize, flat_tree, labelled_brackets, linearize,
    parse_brackets, read_mrg, sentence_score, strip_label, tree_record,
)
