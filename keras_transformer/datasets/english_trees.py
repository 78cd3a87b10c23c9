"""English sentences with their constituency trees, from a small grammar over the
lexicon of `synthetic_en_de`: the embedded data of the parsing recipe (no
treebank needed). Pure Python; the same trees for the same seed.

The grammar (Penn Treebank labels and tags):

    S    -> NP VP . | PP , NP VP . | S , CC S .     (the top level)
    S    -> NP VP                                    (in SBAR and coordination)
    NP   -> DT (JJ) NN | DT (JJ) NNS | PRP | NNP | NP PP
    VP   -> VBD NP (PP) | MD VP | VB NP | VBD SBAR | VBD ADJP
    PP   -> IN NP
    SBAR -> IN S            ("that" clauses after know, say, hope, believe)
    ADJP -> (RB) JJ

Objects agree with their verbs (`buy` takes things, food, drinks or animals),
adjectives with their nouns, and clauses nest up to `max_depth` levels.
"""

import json
import random

from keras_transformer.datasets.synthetic_en_de import lexicon
from keras_transformer.parsing import Tree, tree_record

_PREPOSITIONS = ("in", "on", "near", "with", "behind")
_PLACE_KINDS = frozenset({"thing", "vehicle", "animal", "person"})
_SAYING = {"know": "knew", "say": "said", "hope": "hoped", "believe": "believed"}
_DEGREE = ("very", "quite", "really")
_SUBJECT_PRONOUNS = ("I", "he", "she", "we", "they")
_OBJECT_PRONOUNS = ("me", "him", "her", "us", "them")


def _leaf(tag, word):
    return Tree(tag, [word])


class _Grammar:
    def __init__(self, rng, max_depth):
        self.rng = rng
        self.max_depth = max_depth
        self.nouns = [n for n in lexicon.NOUNS.values() if " " not in n.en]
        self.verbs = [v for v in lexicon.VERBS.values()
                      if " " not in v.en and v.objects and "person" in v.subjects]

    def noun_phrase(self, kinds=None, depth=0, allow_pp=True, subject=False):
        rng = self.rng
        choice = rng.random()
        if kinds is None or "person" in kinds:
            if choice < 0.15:
                pronouns = _SUBJECT_PRONOUNS if subject else _OBJECT_PRONOUNS
                return Tree("NP", [_leaf("PRP", rng.choice(pronouns))])
            if choice < 0.3:
                return Tree("NP", [_leaf("NNP", rng.choice(lexicon.NAMES))])
        pool = [n for n in self.nouns if kinds is None or n.kinds & kinds] or self.nouns
        noun = rng.choice(pool)
        children = []
        plural = noun.countable and rng.random() < 0.3
        children.append(_leaf("DT", rng.choice(("the", "some") if plural else ("the", "a", "this"))))
        if rng.random() < 0.4:
            children.append(_leaf("JJ", rng.choice(lexicon.ADJECTIVE_SETS[noun.adjectives])))
        if not noun.countable and children[0].children[0] == "a":
            children[0] = _leaf("DT", "the")
        children.append(_leaf("NNS", noun.en_plural) if plural else _leaf("NN", noun.en))
        if children[0].children[0] == "a" and children[1].children[0][0] in "aeiou":
            children[0] = _leaf("DT", "an")
        phrase = Tree("NP", children)
        if allow_pp and depth < self.max_depth and rng.random() < 0.25:
            return Tree("NP", [phrase, self.prepositional_phrase(depth + 1)])
        return phrase

    def prepositional_phrase(self, depth):
        preposition = self.rng.choice(_PREPOSITIONS)
        return Tree("PP", [_leaf("IN", preposition),
                           self.noun_phrase(_PLACE_KINDS, depth, allow_pp=depth < self.max_depth)])

    def verb_phrase(self, depth):
        rng = self.rng
        choice = rng.random()
        if choice < 0.15 and depth < self.max_depth:
            verb = rng.choice(sorted(_SAYING))
            clause = self.clause(depth + 1)
            return Tree("VP", [_leaf("VBD", _SAYING[verb]), Tree("SBAR", [_leaf("IN", "that"), clause])])
        if choice < 0.25:
            adjective = [_leaf("JJ", rng.choice(sorted(lexicon.PREDICATES)))]
            if rng.random() < 0.4:
                adjective.insert(0, _leaf("RB", rng.choice(_DEGREE)))
            return Tree("VP", [_leaf("VBD", "was"), Tree("ADJP", adjective)])
        verb = rng.choice(self.verbs)
        obj = self.noun_phrase(verb.objects, depth, allow_pp=False)
        if choice < 0.4:
            modal = rng.choice(("will", "can", "must"))
            return Tree("VP", [_leaf("MD", modal), Tree("VP", [_leaf("VB", verb.en), obj])])
        children = [_leaf("VBD", verb.en_past), obj]
        if depth < self.max_depth and rng.random() < 0.3:
            children.append(self.prepositional_phrase(depth + 1))
        return Tree("VP", children)

    def clause(self, depth):
        return Tree("S", [self.noun_phrase({"person"}, depth, subject=True), self.verb_phrase(depth)])

    def sentence(self):
        rng = self.rng
        choice = rng.random()
        if choice < 0.15:
            first, second = self.clause(1), self.clause(1)
            tree = Tree("S", [first, _leaf(",", ","), _leaf("CC", rng.choice(("and", "but"))), second])
        elif choice < 0.3:
            clause = self.clause(1)
            tree = Tree("S", [self.prepositional_phrase(1), _leaf(",", ",")] + clause.children)
        else:
            tree = self.clause(0)
        tree.children.append(_leaf(".", "."))
        return tree


def generate_trees(count, seed=0, max_depth=2):
    """`count` trees (with repeats possible), the same for the same seed."""
    grammar = _Grammar(random.Random(seed), max_depth)
    return [grammar.sentence() for _ in range(count)]


def make_splits(train_size, test_size, seed=0, max_depth=2):
    """(train, test) lists of distinct trees; no test sentence occurs in training."""
    grammar = _Grammar(random.Random(seed), max_depth)
    seen, trees = set(), []
    attempts = 0
    while len(trees) < train_size + test_size:
        attempts += 1
        if attempts > 50 * (train_size + test_size) + 1000:
            raise ValueError(f"the grammar made only {len(trees)} distinct sentences in {attempts} tries; "
                             f"ask for fewer than {train_size + test_size} (or raise max_depth)")
        tree = grammar.sentence()
        sentence = " ".join(tree.words())
        if sentence not in seen:
            seen.add(sentence)
            trees.append(tree)
    return trees[test_size:], trees[:test_size]


def write_jsonl(path, trees, source_key="en", target_key="tree"):
    """Writes `parsing.tree_record` lines (gzip when `path` ends in .gz); returns the count."""
    from keras_transformer.data.corpus import write_jsonl as write_records

    return write_records(path, (tree_record(tree, source_key, target_key) for tree in trees))


def main(argv=None):
    """`python -m keras_transformer.datasets.english_trees N` prints N records."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("count", type=int, nargs="?", default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for tree in generate_trees(args.count, args.seed):
        print(json.dumps(tree_record(tree), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
