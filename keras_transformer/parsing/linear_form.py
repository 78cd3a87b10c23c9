"""A tree's linear form (Vinyals et al. 2015, "Grammar as a Foreign Language"),
the target a model is trained on, and a decoded sequence back into a tree:
`ok`, `repaired` (with the repairs made) or `rejected`."""

from dataclasses import dataclass, field

from keras_transformer.parsing.trees import PUNCTUATION_TAGS, Tree

POS_SYMBOL = "XX"

OK, REPAIRED, REJECTED = "ok", "repaired", "rejected"


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


def tree_record(tree, source_key="en", target_key="tree"):
    """A JSON-lines record for training and scoring: the sentence (words joined by
    spaces), its linear form (the target) and the tree itself under `ptb`."""
    return {source_key: " ".join(tree.words()), target_key: " ".join(linearize(tree)), "ptb": str(tree)}
