"""The public generation API: distinct examples, disjoint train/test splits,
JSON-lines files."""

import dataclasses
import random

from keras_transformer.datasets.synthetic_en_de.numbers import check_int
from keras_transformer.datasets.synthetic_en_de.sampling import CATEGORIES
from keras_transformer.datasets.synthetic_en_de.sampling import DEFAULT_WEIGHTS
from keras_transformer.datasets.synthetic_en_de.sampling import GENERATORS
from keras_transformer.datasets.synthetic_en_de.sampling import MAX_ENGLISH_WORDS


@dataclasses.dataclass(frozen=True)
class Example:
    category: str
    en: str
    de: str


def _check_categories(categories):
    if categories is None:
        return list(CATEGORIES)
    if isinstance(categories, str):
        categories = [categories]
    categories = list(categories)
    unknown = [c for c in categories if c not in GENERATORS]
    if unknown or not categories:
        raise ValueError(f"categories must be a non-empty subset of "
                         f"{CATEGORIES}, got {categories!r}")
    return categories


def _draw(rng, categories):
    weights = [DEFAULT_WEIGHTS[c] for c in categories]
    while True:
        category = rng.choices(categories, weights)[0]
        english, german = GENERATORS[category](rng)
        if len(english.split()) <= MAX_ENGLISH_WORDS:
            return Example(category, english, german)


def _collect(rng, n, categories, exclude_en=frozenset(), exclude_de=frozenset()):
    examples, seen = [], set()
    budget = 50 * n + 1000
    while len(examples) < n:
        if budget == 0:
            raise ValueError(
                f"could draw only {len(examples)} of {n} distinct pairs for "
                f"categories {categories}; ask for fewer")
        budget -= 1
        example = _draw(rng, categories)
        if (example.en in seen or example.en in exclude_en
                or example.de in exclude_de):
            continue
        seen.add(example.en)
        examples.append(example)
    return examples


def generate_examples(n, seed=0, categories=None):
    """n distinct (by English side) `Example`s, deterministic in seed."""
    check_int(n, 0, 10 ** 7, "n")
    categories = _check_categories(categories)
    return _collect(random.Random(seed), n, categories)


def generate_pairs(n, seed=0, categories=None):
    """n distinct (English, German) pairs, deterministic in seed.

    categories: None (all of CATEGORIES, mixed by DEFAULT_WEIGHTS) or a
    subset.
    """
    return [(e.en, e.de) for e in generate_examples(n, seed, categories)]


def make_splits(n_train, n_test, seed=0, categories=None, *,
                return_examples=False):
    """(train, test) lists of (English, German) pairs with no sentence shared.

    The held-out pairs are drawn first (so they depend only on n_test, seed
    and categories); train pairs are then drawn from the same distribution,
    skipping any whose English or German side occurs in the held-out split.
    Both splits are free of duplicates. return_examples=True gives
    `Example`s (with their category) instead of pairs.
    """
    check_int(n_train, 0, 10 ** 7, "n_train")
    check_int(n_test, 0, 10 ** 7, "n_test")
    categories = _check_categories(categories)
    rng = random.Random(seed)
    test = _collect(rng, n_test, categories)
    train = _collect(rng, n_train, categories,
                     exclude_en={e.en for e in test},
                     exclude_de={e.de for e in test})
    if return_examples:
        return train, test
    return [(e.en, e.de) for e in train], [(e.en, e.de) for e in test]


def write_jsonl(path, pairs):
    """Writes {"en": ..., "de": ...} lines (gzip if path ends in .gz) with
    `keras_transformer.data.corpus.write_jsonl`.

    pairs: (English, German) tuples or `Example`s (whose category is
    written too). Returns the number of lines written.
    """
    from keras_transformer.data.corpus import write_jsonl as write_records

    def records():
        for index, pair in enumerate(pairs):
            if isinstance(pair, Example):
                yield {"en": pair.en, "de": pair.de, "category": pair.category}
                continue
            try:
                english, german = pair
            except (TypeError, ValueError):
                raise ValueError(f"{path}: pair {index} is not an (english, german) pair: {pair!r}") from None
            if not isinstance(english, str) or not isinstance(german, str):
                raise ValueError(f"{path}: pair {index} must hold two strings")
            yield {"en": english, "de": german}

    return write_records(path, records())
