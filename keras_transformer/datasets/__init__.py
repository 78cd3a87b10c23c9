"""Data sets that ship with the package (generated here, nothing downloaded).

`synthetic_en_de`: the English→German corpus of the quickstart recipe.
`english_trees`: English sentences with constituency trees over the same
lexicon, for the parsing recipe (import it as `keras_transformer.datasets.english_trees`).
"""

from keras_transformer.datasets import synthetic_en_de
from keras_transformer.datasets.synthetic_en_de import generate_pairs
from keras_transformer.datasets.synthetic_en_de import make_splits
from keras_transformer.datasets.synthetic_en_de import write_jsonl

__all__ = ["generate_pairs", "make_splits", "synthetic_en_de", "write_jsonl"]
