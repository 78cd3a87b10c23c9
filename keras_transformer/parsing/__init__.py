"""Constituency parsing as translation (paper, section 6.3): trees, their linear
form, decoding back into trees, and labelled bracket scores. Pure Python; one
module per concept (`trees`, `linear_form`, `brackets`), every name importable
from here.

- `read_mrg` (`trees`) reads Penn Treebank `.mrg` files (several trees a file,
  each in an empty top bracket `( (S ...) )`), removes `-NONE-` empty elements
  (and the constituents left empty by them) and strips function tags and
  indices (`NP-SBJ-1` -> `NP`, `ADJP-PRD=2` -> `ADJP`).
- `linearize` (`linear_form`) writes a tree as the token sequence of Vinyals et
  al. (2015), "Grammar as a Foreign Language":
  `(S (NP XX )NP (VP XX (NP XX XX )NP )VP . )S`. Part-of-speech tags become
  `XX`; punctuation keeps its tag (`.`, `,`, ...), which is the word itself, so
  the decoder can line it up with the input.
- `delinearize` (`linear_form`) turns a decoded sequence back into a tree over
  the input words. Unbalanced or ill-formed output is repaired (brackets closed
  or dropped, words the output skipped attached at the end) or, when no tree
  can be made of it, rejected; each result carries its status (`ok`,
  `repaired`, `rejected`) and the repairs made, so that callers can count each
  case. A rejected sentence gets a flat tree with no scored brackets: it costs
  recall, as a missing parse does.
- `bracket_scores` (`brackets`) computes labelled bracket precision, recall and
  F1 under the conventions of EVALB's COLLINS.prm: punctuation (the tags
  `` '' . : ,) is removed before spans are taken, the artificial root bracket
  (`TOP`, `ROOT` or the empty label of `.mrg` files; the sentence's `S` below
  it counts) and preterminals are not brackets, `ADVP` and `PRT` are the same
  label, and brackets are matched as a multiset (a gold bracket matches at most
  one test bracket). EVALB decides punctuation by each tree's own tags (and its
  2006 fix re-inserts words when the two trees disagree); a decoded tree has
  only `XX` tags, so here the gold tree's tags decide for both.
"""

from keras_transformer.parsing.brackets import (
    EQUIVALENT_LABELS, ROOT_LABELS, BracketScore, bracket_scores, labelled_brackets, sentence_score,
)
from keras_transformer.parsing.linear_form import (
    OK, POS_SYMBOL, REJECTED, REPAIRED, Decoded, delinearize, flat_tree, linearize, tree_record,
)
from keras_transformer.parsing.trees import (
    EMPTY_ELEMENT, PUNCTUATION_TAGS, ParseError, Tree, clean_tree, parse_brackets, read_mrg, strip_label,
)

__all__ = [
    "EMPTY_ELEMENT", "EQUIVALENT_LABELS", "OK", "POS_SYMBOL", "PUNCTUATION_TAGS", "REJECTED", "REPAIRED",
    "ROOT_LABELS", "BracketScore", "Decoded", "ParseError", "Tree", "bracket_scores", "clean_tree", "delinearize",
    "flat_tree", "labelled_brackets", "linearize", "parse_brackets", "read_mrg", "sentence_score", "strip_label",
    "tree_record",
]
