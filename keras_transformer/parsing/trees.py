"""Constituency parsing as translation (paper, section 6.3): trees, their linear
form, decoding back into trees, and labelled bracket scores. Pure Python.

- `read_mrg` reads Penn Treebank `.mrg` files (several trees a file, each in an
  empty top bracket `( (S ...) )`), removes `-NONE-` empty elements (and the
  constituents left empty by them) and strips function tags and indices
  (`NP-SBJ-1` -> `NP`, `ADJP-PRD=2` -> `ADJP`).
- `linearize` writes a tree as the token sequence of Vinyals et al. (2015),
  "Grammar as a Foreign Language": `(S (NP XX )NP (VP XX (NP XX XX )NP )VP . )S`.
  Part-of-speech tags become `XX`; punctuation keeps its tag (`.`, `,`, ...),
  which is the word itself, so the decoder can line it up with the input.
- `delinearize` turns a decoded sequence back into a tree over the input
  words. Unbalanced or ill-formed output is repaired (brackets closed or
  dropped, words the output skipped attached at the end) or, when no tree can
  be made of it, rejected; each result carries its status (`ok`, `repaired`,
  `rejected`) and the repairs made, so that callers can count each case. A
  rejected sentence gets a flat tree with no scored brackets: it costs recall,
  as a missing parse does.
- `bracket_scores` computes labelled bracket precision, recall and F1 under the
  conventions of EVALB's COLLINS.prm: punctuation (the tags `` '' . : ,) is
  removed before spans are taken, the artificial root bracket (`TOP`, `ROOT`
  or the empty label of `.mrg` files; the sentence's `S` below it counts) and
  preterminals are not brackets, `ADVP` and `PRT` are the same label, and
  brackets are matched as a multiset (a gold bracket matches at most one test
  bracket). EVALB decides punctuation by each tree's own tags (and its 2006
  fix re-inserts words when the two trees disagree); a decoded tree has only
  `XX` tags, so here the gold tree's tags decide for both.
"""

import re
from collections import Counter
from dataclasses import dataclass, field

POS_SYMBOL = "XX"
# EVALB COLLINS.prm: DELETE_LABEL for words (punctuation), roots, and EQ_LABEL.
PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
ROOT_LABELS = frozenset({"", "TOP", "ROOT"})
EQUIVALENT_LABELS = {"PRT": "ADVP"}
EMPTY_ELEMENT = "-NONE-"

OK, REPAIRED, REJECTED = "ok", "repaired", "rejected"

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class ParseError(ValueError):
    """Malformed bracketed text; the message names the source and line."""


class Tree:
    """A constituent: `label` and `children`, each a Tree or, under a preterminal, one word."""

    __slots__ = ("label", "children")

    def __init__(self, label, children=()):
        self.label = label
        self.children = list(children)

    @property
    def is_preterminal(self):
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def leaves(self):
        """The preterminals, left to right."""
        if self.is_preterminal:
            return [self]
        return [leaf for child in self.children for leaf in child.leaves()]

    def words(self):
        return [leaf.children[0] for leaf in self.leaves()]

    def tags(self):
        return [leaf.label for leaf in self.leaves()]

    def __eq__(self, other):
        return isinstance(other, Tree) and (self.label, self.children) == (other.label, other.children)

    def __repr__(self):
        return f"Tree({str(self)!r})"

    def __str__(self):
        """Penn Treebank brackets on one line: `(S (NP (DT the) (NN cat)) ...)`."""
        if self.is_preterminal:
            return f"({self.label} {self.children[0]})"
        inside = " ".join(str(child) for child in self.children)
        return f"({self.label} {inside})" if self.label else f"( {inside})"


def parse_brackets(text, source="<string>"):
    """The trees of a bracketed text (several allowed), as written: no cleaning.
    Errors name `source` and the line."""
    trees, stack = [], []  # stack of (tree, line where it opened)
    expecting_label = False
    for line_number, line in enumerate(text.splitlines(), 1):
        for token in _TOKEN.findall(line):
            if expecting_label:
                expecting_label = False
                if token not in ("(", ")"):
                    stack[-1][0].label = token
                    continue
            if token == "(":
                stack.append((Tree(""), line_number))
                expecting_label = True
            elif token == ")":
                if not stack:
                    raise ParseError(f"{source}:{line_number}: ')' closes nothing")
                node, opened = stack.pop()
                if not node.children:
                    raise ParseError(f"{source}:{opened}: empty constituent ({node.label})")
                if stack:
                    parent = stack[-1][0]
                    if parent.children and isinstance(parent.children[0], str):
                        raise ParseError(f"{source}:{line_number}: ({parent.label} ...) has both a word "
                                         "and constituents")
                    parent.children.append(node)
                else:
                    trees.append(node)
            else:
                if not stack:
                    raise ParseError(f"{source}:{line_number}: word {token!r} outside any bracket")
                node = stack[-1][0]
                if node.children:
                    raise ParseError(f"{source}:{line_number}: ({node.label} ...) has more than one word "
                                     f"or a word after constituents ({token!r})")
                node.children.append(token)
    if stack:
        raise ParseError(f"{source}:{stack[-1][1]}: bracket opened here is never closed "
                         f"({len(stack)} open at the end)")
    return trees


def strip_label(label):
    """`NP-SBJ-1` -> `NP`, `ADJP-PRD=2` -> `ADJP`; `-NONE-`, `-LRB-` and the like stay."""
    if len(label) > 1 and label.startswith("-") and label.endswith("-"):
        return label
    return re.split(r"[-=|]", label, maxsplit=1)[0] or label


def clean_tree(tree):
    """The tree without its empty top bracket(s), `-NONE-` elements, constituents
    left empty, function tags and indices; None when nothing is left."""
    while not tree.label and len(tree.children) == 1 and isinstance(tree.children[0], Tree):
        tree = tree.children[0]

    def walk(node):
        if node.is_preterminal:
            return None if node.label == EMPTY_ELEMENT else Tree(strip_label(node.label), node.children)
        children = [kept for kept in (walk(child) for child in node.children) if kept is not None]
        return Tree(strip_label(node.label), children) if children else None

    return walk(tree)


def read_mrg(path):
    """The cleaned trees of a Penn Treebank `.mrg` file, in order (see `clean_tree`)."""
    with open(path, encoding="utf-8") as stream:
        text = stream.read()
    trees = []
    for number, tree in enumerate(parse_brackets(text, source=str(path)), 1):
        cleaned = clean_tree(tree)
        if cleaned is None:
            raise ParseError(f"{path}: tree {number} has only empty elements")
        trees.append(cleaned)
    return trees


def linearize(tree, pos_symbol=POS_SYMBOL):
    """The tree as Vinyals et al.'s token sequence: `(L` ... `)L` around each
    constituent, `pos_symbol` for each word (punctuation: its tag)."""
    tokens = []

    def walk(node):
        if node.is_preterminal:
            tokens.append(node.label if node.label in PUNCTUATION_TAGS else pos_symbol)
            return
        tokens.append("(" + node.label)
        for child in node.children:
            walk(child)
        tokens.append(")" + node.label)

    walk(tree)
    return tokens


@dataclass
class Decoded:
    """What `delinearize` made of one output: `status` is ok, repaired or rejected."""

    status: str
    tree: Tree
    repairs: list = field(default_factory=list)


def flat_tree(words, pos_symbol=POS_SYMBOL):
    """The stand-in for a rejected output: the words under an unlabelled root, no brackets to score."""
    return Tree("", [Tree(pos_symbol, [word]) for word in words])


def delinearize(tokens, words, pos_symbol=POS_SYMBOL):
    """A tree over `words` from a decoded token sequence (a list or a space-separated string).

    Repairs, each noted in `Decoded.repairs`: a closing bracket with nothing
    open, or an unknown token, is dropped; one whose label is open deeper
    closes the brackets above it; one whose label is not open closes the
    innermost bracket; brackets still open at the end are closed; word slots
    beyond the last word are dropped and words without a slot are attached at
    the end of the root; constituents left empty are removed; punctuation or
    words outside the single top constituent are moved into it. Rejected: no
    constituent at all, or more than one top-level constituent.
    """
    if isinstance(tokens, str):
        tokens = tokens.split()
    words = list(words)
    repairs, roots, stack, used = [], [], [], 0
    for token in tokens:
        if len(token) > 1 and token[0] == "(":
            node = Tree(token[1:])
            (stack[-1].children if stack else roots).append(node)
            stack.append(node)
        elif len(token) > 1 and token[0] == ")":
            label = token[1:]
            if not stack:
                repairs.append(f"dropped {token}: no bracket is open")
            elif stack[-1].label == label:
                stack.pop()
            else:
                depth = next((i for i in range(len(stack) - 1, -1, -1) if stack[i].label == label), None)
                if depth is None:
                    repairs.append(f"{token} closed ({stack[-1].label}")
                    stack.pop()
                else:
                    repairs.append(f"{token} also closed " + " ".join("(" + n.label for n in stack[depth + 1:]))
                    del stack[depth:]
        elif token == pos_symbol or token in PUNCTUATION_TAGS:
            if used == len(words):
                repairs.append(f"dropped {token}: no word left for it")
                continue
            (stack[-1].children if stack else roots).append(Tree(token, [words[used]]))
            used += 1
        else:
            repairs.append(f"dropped unknown token {token!r}")
    if stack:
        repairs.append(f"closed {len(stack)} bracket(s) left open: " + " ".join("(" + n.label for n in stack))
    constituents = [node for node in roots if not node.is_preterminal]
    if not words or len(constituents) != 1:
        reason = "no words" if not words else (
            "no constituent" if not constituents else f"{len(constituents)} top-level constituents")
        return Decoded(REJECTED, flat_tree(words, pos_symbol), repairs + [f"rejected: {reason}"])
    root = constituents[0]
    position = roots.index(root)
    if len(roots) > 1:
        repairs.append(f"moved {len(roots) - 1} word(s) outside ({root.label} into it")
        root.children = roots[:position] + root.children + roots[position + 1:]
    if used < len(words):
        repairs.append(f"attached {len(words) - used} word(s) the output had no slot for")
        root.children += [Tree(pos_symbol, [word]) for word in words[used:]]
    root = _without_empty_constituents(root, repairs)
    if root is None:
        return Decoded(REJECTED, flat_tree(words, pos_symbol), repairs + ["rejected: no word in any constituent"])
    return Decoded(REPAIRED if repairs else OK, root, repairs)


def _without_empty_constituents(node, repairs):
    if node.is_preterminal:
        return node
    children = [kept for kept in (_without_empty_constituents(c, repairs) for c in node.children) if kept]
    if not children:
        repairs.append(f"removed empty ({node.label} )")
        return None
    node.children = children
    return node


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


def tree_record(tree, source_key="en", target_key="tree"):
    """A JSON-lines record for training and scoring: the sentence (words joined by
    spaces), its linear form (the target) and the tree itself under `ptb`."""
    return {source_key: " ".join(tree.words()), target_key: " ".join(linearize(tree)), "ptb": str(tree)}


def bracket_scores(gold_trees, test_trees):
    """Corpus-level labelled bracket precision, recall and F1 (counts summed over sentences, as EVALB)."""
    gold_trees, test_trees = list(gold_trees), list(test_trees)
    if len(gold_trees) != len(test_trees):
        raise ValueError(f"{len(gold_trees)} gold trees but {len(test_trees)} test trees")
    total = BracketScore()
    for index, (gold, test) in enumerate(zip(gold_trees, test_trees)):
        total = total + sentence_score(gold, test, index)
    return total
