"""The split files of the recipes (parallel_text's source hash and ref-book
hold-out, back_translation's monolingual hold-out, fine_tuning's split) stay
the same for the same inputs: their contents are pinned by SHA-256, as the
code before `keras_transformer.data.splits` wrote them. A change here changes
every recipe's test split, so past scores could no longer be compared."""

import gzip
import hashlib
import importlib.util
import json
import random
from argparse import Namespace
from pathlib import Path

import pytest

from keras_transformer import config as config_lib

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["the", "cat", "dog", "sees", "eats", "a", "big", "red", "fish", "and", "über", "naïve"]
BOOKS = {"Genesis": 40, "Song of Songs": 25, "Jude": 15, "Ruth": 20}


def load_recipe(name):
    spec = importlib.util.spec_from_file_location(f"{name}_recipe_splits", ROOT / "recipes" / name / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """100 verses in 4 books; a source repeated in every ninth verse (with two
    translations), one empty pair and one over max_chars."""
    rng = random.Random(7)
    rows = []
    for book, verses in BOOKS.items():
        for verse in range(1, verses + 1):
            if verse % 9 == 0:
                en, de = "and it was so", f"und so war es {verse % 2}"
            else:
                words = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
                en, de = " ".join(words), " ".join(word.upper() for word in reversed(words))
            rows.append({"ref": f"{book} 1:{verse}", "en": en, "de": de})
    rows[5]["de"] = ""
    rows[17]["en"] = "long " * 30
    path = tmp_path_factory.mktemp("splits") / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as stream:
        for row in rows:
            stream.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def config_for(output_dir):
    config = config_lib.resolve([ROOT / "recipes" / "parallel_text" / "config.yaml"],
                                assignments=[f"output_dir={output_dir}", "data.max_chars=100"])
    return config


def digests(directory, names):
    """SHA-256 of each split file's contents (gzip's own header holds a time stamp)."""
    result = {}
    for name in names:
        with gzip.open(directory / f"{name}.jsonl.gz", "rb") as stream:
            result[name] = hashlib.sha256(stream.read()).hexdigest()[:16]
    return result


PINNED_HASH = {"train": "08cdb0aee2bb24f9", "valid": "f33f13eeb07c2f93", "test": "8b8b54295f84b596"}
PINNED_BOOK = {"train": "0c06b2ca4b921d69", "valid": "87ff7c6520bb4337", "test": "4565e1ab8b8d211e"}
PINNED_BACK_TRANSLATION = {"train": "9118ffefe3a12a25", "valid": "f33f13eeb07c2f93", "test": "8b8b54295f84b596",
                           "monolingual": "1e5a17d10ceeead5"}


def test_parallel_text_hash_split_is_pinned(corpus, tmp_path):
    recipe = load_recipe("parallel_text")
    config = config_for(tmp_path)
    report = recipe.prepare(Namespace(corpora=[str(corpus)], pairs=[], holdout_by=None, test_size=20,
                                      valid_size=10), config)
    assert report["sizes"] == {"train": 68, "valid": 10, "test": 20}
    assert digests(tmp_path / "data", ("train", "valid", "test")) == PINNED_HASH


def test_parallel_text_book_split_is_pinned(corpus, tmp_path):
    recipe = load_recipe("parallel_text")
    config = config_for(tmp_path)
    report = recipe.prepare(Namespace(corpora=[str(corpus)], pairs=[], holdout_by="ref-book", test_size=30,
                                      valid_size=10), config)
    assert report["held_out_books"] == ["Jude"]
    assert report["dropped_train_pairs_sharing_test_source"] == 8  # "and it was so" occurs in every book
    assert digests(tmp_path / "data", ("train", "valid", "test")) == PINNED_BOOK


def test_the_package_split_is_the_recipes(corpus, tmp_path):
    from keras_transformer.data import splits

    report = splits.prepare(tmp_path, [corpus], max_chars=100, test_size=20, valid_size=10)
    assert json.loads((tmp_path / splits.SPLIT_REPORT).read_text()) == report
    assert digests(tmp_path, splits.SPLITS) == PINNED_HASH


def test_fine_tuning_split_is_parallel_texts(corpus, tmp_path):
    recipe = load_recipe("fine_tuning")
    files, sizes = recipe.split_corpus(str(corpus), config_for(tmp_path), Namespace(test_size=20, valid_size=10),
                                       "data")
    assert files["train"] == str(tmp_path / "data" / "train.jsonl.gz")
    assert digests(tmp_path / "data", ("train", "valid", "test")) == PINNED_HASH


def test_back_translation_split_is_pinned(corpus, tmp_path):
    recipe = load_recipe("back_translation")
    args = recipe.parse_arguments([str(corpus), "--test-size", "20", "--valid-size", "10",
                                   "--monolingual-size", "25"])
    sizes = recipe.prepare_data(args, config_for(tmp_path), tmp_path / "data")
    assert sizes == {"train": 43, "valid": 10, "test": 20, "monolingual": 25}
    assert digests(tmp_path / "data", ("train", "valid", "test", "monolingual")) == PINNED_BACK_TRANSLATION
