"""Constituency trees: the `Tree`, Penn Treebank brackets read into trees, and
`.mrg` files read and cleaned (empty elements, function tags and indices removed)."""

import re

# The Penn Treebank's punctuation tags: EVALB's COLLINS.prm deletes these words
# before it scores (DELETE_LABEL), and the linear form keeps them as words.
PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
EMPTY_ELEMENT = "-NONE-"

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
