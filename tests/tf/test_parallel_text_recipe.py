"""recipes/parallel_text on a tiny JSON-lines fixture: splits, input errors, and a 2-step run end to end."""

import gzip
import importlib.util
import json
import random
from pathlib import Path

import pytest
from conftest import TINY_MODEL

from keras_transformer.data import splits as corpus_splits
from keras_transformer.data.corpus import CorpusError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recipe():
    spec = importlib.util.spec_from_file_location("parallel_text_run", ROOT / "recipes" / "parallel_text" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WORDS_EN = ["the", "cat", "dog", "sees", "eats", "a", "big", "red", "fish", "and"]
WORDS_ES = {"the": "el", "cat": "gato", "dog": "perro", "sees": "ve", "eats": "come", "a": "un",
            "big": "grande", "red": "rojo", "fish": "pez", "and": "y"}
BOOKS = {"Genesis": 14, "Song of Songs": 6, "Jude": 4}
SHARED = ("and it was so", "y fue asi")  # occurs once in every book


def make_rows(seed=0):
    rng = random.Random(seed)
    rows = []
    for book, verses in BOOKS.items():
        for verse in range(1, verses + 1):
            if verse == 2:
                en, es = SHARED
            else:
                words = [rng.choice(WORDS_EN) for _ in range(rng.randint(3, 6))]
                en, es = " ".join(words), " ".join(WORDS_ES[w] for w in words)
            rows.append({"ref": f"{book} 1:{verse}", "en": en, "es": es})
    return rows


def write_jsonl(path, rows):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as stream:
        for row in rows:
            stream.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def read_split(path):
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def test_book_of():
    assert corpus_splits.book_of("Song of Songs 1:2") == "Song of Songs"
    assert corpus_splits.book_of("1 Kings 2:3") == "1 Kings"
    assert corpus_splits.book_of("Genesis") == ""


def test_split_by_book_holds_out_whole_books(tmp_path):
    rows = make_rows()
    path = write_jsonl(tmp_path / "bible.jsonl.gz", rows)
    records, _ = corpus_splits.read_records([path], source_key="en", target_key="es", with_refs=True)
    assert len(records) == len(rows)
    splits, held_out, dropped = corpus_splits.split_by_book(records, test_size=10, valid_size=3)
    assert held_out and set(held_out) < set(BOOKS)
    assert sum(BOOKS[b] for b in held_out) <= 10
    test_books = {corpus_splits.book_of(r[2]) for r in splits["test"]}
    assert test_books == set(held_out)
    assert len(splits["test"]) == sum(BOOKS[b] for b in held_out)  # every verse of a held-out book
    for name in ("train", "valid"):
        assert not {corpus_splits.book_of(r[2]) for r in splits[name]} & set(held_out)
    # The verse every book shares stays in the test split only.
    assert dropped == len(BOOKS) - len(held_out)
    assert SHARED[0] not in {r[0] for r in splits["train"] + splits["valid"]}
    assert len(splits["valid"]) >= 3
    assert sum(len(s) for s in splits.values()) + dropped == len(rows)


def test_split_by_hash_is_deterministic_and_keeps_duplicates_together():
    rng = random.Random(1)
    records = [(f"sentence {i % 37}", f"satz {i}", None) for i in range(120)]  # every source 3-4 times
    first = corpus_splits.split_by_hash(records, test_size=20, valid_size=10)
    shuffled = records[:]
    rng.shuffle(shuffled)
    second = corpus_splits.split_by_hash(shuffled, test_size=20, valid_size=10)
    for name in ("train", "valid", "test"):
        assert sorted(first[name]) == sorted(second[name])
    sources = {name: {r[0] for r in first[name]} for name in first}
    assert not sources["train"] & sources["test"]
    assert not sources["train"] & sources["valid"]
    assert not sources["valid"] & sources["test"]
    assert 20 <= len(first["test"]) < 24 and 10 <= len(first["valid"]) < 14
    assert sum(len(s) for s in first.values()) == len(records)


@pytest.mark.parametrize(
    "lines, line, words",
    [
        ([{"ref": "Jude 1:1", "en": "a", "es": "b"}, '{"ref": "Jude 1:2", "en": '], 2, "malformed JSON"),
        ([{"ref": "Jude 1:1", "en": "a", "es": "b"}, {"ref": "Jude 1:2", "en": "a"}], 2, "missing key 'es'"),
        ([{"ref": "Jude 1:1", "en": "a", "es": "b"}, {"en": "a", "es": "b"}], 2, "missing key 'ref'"),
        ([{"ref": "Jude", "en": "a", "es": "b"}], 1, "BOOK CHAPTER:VERSE"),
        ([{"ref": "Jude 1:1", "en": 3, "es": "b"}], 1, "not a string"),
    ],
)
def test_bad_input_names_file_and_line(recipe, tmp_path, capsys, lines, line, words):
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(CorpusError) as error:
        corpus_splits.read_records([path], source_key="en", target_key="es", with_refs=True)
    assert error.value.line == line and words in str(error.value)
    code = recipe.main([str(path), "--target-key", "es", "--holdout-by", "ref-book",
                        "--output-dir", str(tmp_path / "run")])
    assert code == 2
    assert f"{path}:{line}: " in capsys.readouterr().err


def test_ref_book_needs_json_lines(recipe, tmp_path, capsys):
    path = tmp_path / "pairs.tsv"
    path.write_text("a\tb\nc\td\n", encoding="utf-8")
    assert recipe.main([str(path), "--holdout-by", "ref-book", "--output-dir", str(tmp_path / "run")]) == 2
    assert f"{path}: --holdout-by ref-book needs JSON lines" in capsys.readouterr().err


def test_end_to_end_tiny_run(recipe, tmp_path):
    corpus = write_jsonl(tmp_path / "bible.jsonl.gz", make_rows())
    output_dir = tmp_path / "run"
    code = recipe.main([
        str(corpus), "--target-key", "es", "--holdout-by", "ref-book", "--test-size", "10",
        "--valid-size", "3", "--output-dir", str(output_dir),
        *(word for setting in TINY_MODEL for word in ("--set", setting)),
        "--set", "data.vocabulary_size=40", "--set", "training.max_steps=2",
        "--set", "training.tokens_per_batch=256", "--set", "training.warmup_steps=10",
        "--set", "decoding.beam_size=2", "--set", "decoding.max_extra_length=4",
    ])
    assert code == 0
    report = json.loads((output_dir / "data" / "split.json").read_text())
    test = read_split(output_dir / "data" / "test.jsonl.gz")
    train = read_split(output_dir / "data" / "train.jsonl.gz")
    assert report["sizes"]["test"] == len(test) == sum(BOOKS[b] for b in report["held_out_books"])
    assert report["sizes"]["train"] == len(train)
    assert {corpus_splits.book_of(r["ref"]) for r in test} == set(report["held_out_books"])
    assert not {corpus_splits.book_of(r["ref"]) for r in train} & set(report["held_out_books"])
    assert set(test[0]) == {"ref", "en", "es"}
    result = json.loads((output_dir / "eval.json").read_text())
    assert result["sentences"] == len(test)
    assert result["corpus"] == str(output_dir / "data" / "test.jsonl.gz")
    assert 0.0 <= result["bleu"] <= 100.0 and 0.0 <= result["exact_match"] <= 1.0
    config = json.loads((output_dir / "config.json").read_text())
    assert config["model"]["d_model"] == 16 and config["data"]["target_key"] == "es"
