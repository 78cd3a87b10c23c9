"""Train / validation / test splits of parallel corpora, as the recipes make them.

Free of TensorFlow: `recipes/parallel_text`, `recipes/fine_tuning`,
`recipes/back_translation` and `benchmarks/quality.py` split with this
module, so a corpus has the same test split in all of them (the files are
pinned by tests/tf/test_corpus_splits.py).

  * `split_by_hash`: distinct source sentences ordered by their SHA-256, so
    a sentence repeated in the corpus never lands in two splits and the
    input order does not matter;
  * `split_by_book`: whole books of a JSON-lines `ref` ("Genesis 1:1") held
    out for testing, and no training pair whose source occurs in them;
  * `hold_out_targets`: the next sentences in hash order after test and
    validation, their target side kept as monolingual text
    (back-translation).

A record is a tuple `(source, target, ref)`; `ref` is None without refs.
"""

import hashlib
import json
from pathlib import Path

from keras_transformer.data.corpus import (
    CorpusError,
    CorpusStats,
    PairFilter,
    is_jsonl,
    open_corpus,
    read_jsonl,
    write_jsonl,
)

SPLITS = ("train", "valid", "test")
SPLIT_REPORT = "split.json"


def book_of(ref):
    """'1 Kings 2:3' -> '1 Kings' (the part before the last space); '' if none."""
    book, space, _ = ref.strip().rpartition(" ")
    return book.strip() if space else ""


def read_records(inputs, text_pairs=(), source_key="en", target_key="de", max_chars=None, with_refs=False):
    """Reads every input; returns (records, per-file stats) with records `(source, target, ref)`.

    `inputs` are JSON-lines or TSV files, `text_pairs` `(source, target)`
    plain-text file pairs. Empty pairs and pairs with a side over
    `max_chars` are dropped and counted; a line of each file's report is
    printed.
    """
    pair_filter = PairFilter(max_chars=max_chars)
    records, report = [], []
    sources = [(path, None) for path in inputs] + [tuple(pair) for pair in text_pairs]
    for path, target_path in sources:
        stats = CorpusStats()
        if target_path is None and is_jsonl(path):
            # Unfiltered, so that record i is line i + 1 (named by a bad ref).
            raw = read_jsonl(path, source_key=source_key, target_key=target_key, strip=False, skip_empty=False,
                             extra_keys=("ref",) if with_refs else ())
        else:
            if with_refs:
                raise ValueError(f"{path}: --holdout-by ref-book needs JSON lines with a 'ref' field.")
            raw = open_corpus(path, target_path, strip=False, skip_empty=False)
        for line_number, (source, target, *ref) in enumerate(raw, start=1):
            ref = ref[0] if ref else None
            if ref is not None and not book_of(ref):
                raise CorpusError(path, line_number, f"'ref' is {ref!r}: expected 'BOOK CHAPTER:VERSE'")
            pair = pair_filter.apply(source, target, stats)
            if pair is not None:
                records.append((pair[0], pair[1], ref))
        name = str(path) if target_path is None else f"{path} | {target_path}"
        print(f"{name}: {stats}", flush=True)
        report.append({"file": name, "read": stats.read, "kept": stats.kept,
                       "skipped_empty": stats.skipped_empty, "skipped_long": stats.skipped_long})
    return records, report


def _hash(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_by_hash(records, test_size, valid_size):
    """Deterministic split keyed on the source sentence.

    Distinct source sentences are ordered by their SHA-256; the first ones fill
    the test split (all pairs of a sentence together) until it holds at least
    `test_size` pairs, the next ones the validation split, the rest training.
    The result does not depend on the order of the input.
    """
    by_source = {}
    for record in records:
        by_source.setdefault(record[0], []).append(record)
    splits = {name: [] for name in SPLITS}
    for source in sorted(by_source, key=_hash):
        if len(splits["test"]) < test_size:
            name = "test"
        elif len(splits["valid"]) < valid_size:
            name = "valid"
        else:
            name = "train"
        splits[name].extend(by_source[source])
    return splits


def split_by_book(records, test_size, valid_size):
    """Whole books to the test split; returns (splits, held-out books, dropped count).

    Books are visited in the order of a hash of their name; a book joins the
    test split if it still fits into `test_size` pairs (when no book is that
    small, the smallest one is held out). At least one book stays for
    training. Training pairs whose source sentence occurs in a held-out book
    are dropped so that no test sentence is seen in training.
    """
    books = {}
    for record in records:
        books.setdefault(book_of(record[2]), []).append(record)
    if len(books) < 2:
        raise ValueError(f"--holdout-by ref-book needs at least two books; found {sorted(books)}.")
    held_out, held = [], 0
    for book in sorted(books, key=_hash):
        if held + len(books[book]) <= test_size and len(held_out) < len(books) - 1:
            held_out.append(book)
            held += len(books[book])
    if not held_out:
        held_out = [min(books, key=lambda b: (len(books[b]), _hash(b)))]
    test = [r for book in held_out for r in books[book]]
    test_sources = {r[0] for r in test}
    rest = [r for book in books if book not in held_out for r in books[book]]
    kept = [r for r in rest if r[0] not in test_sources]
    splits = split_by_hash(kept, 0, valid_size)
    splits["test"] = test
    return splits, sorted(held_out), len(rest) - len(kept)


def hold_out_targets(train_records, size):
    """`(targets, rest)`: the target sides of the first `size` pairs of
    `train_records` in the hash order of their sources (their sources
    discarded: monolingual text), and the remaining training pairs."""
    held = split_by_hash(train_records, size, 0)
    return [record[1] for record in held["test"]], held["train"]


def write_split(path, records, source_key, target_key):
    """Writes records as JSON lines (`ref` kept when there is one)."""
    rows = ({source_key: source, target_key: target, **({"ref": ref} if ref is not None else {})}
            for source, target, ref in records)
    write_jsonl(path, rows)


def prepare(data_dir, corpora, text_pairs=(), *, source_key="en", target_key="de", max_chars=None,
            test_size=1000, valid_size=500, holdout_by=None):
    """Reads the inputs, splits them (`holdout_by`: None for the source
    hash, "ref-book" for whole books) and writes `data_dir/{train,valid,
    test}.jsonl.gz` (an empty validation split is not written) and
    `split.json`, the report it returns (inputs, method, sizes)."""
    with_refs = holdout_by == "ref-book"
    records, files = read_records(corpora, text_pairs, source_key, target_key, max_chars, with_refs=with_refs)
    if not records:
        raise ValueError("the inputs hold no usable sentence pairs.")
    report = {"inputs": files, "source_key": source_key, "target_key": target_key,
              "method": "ref-book" if with_refs else "source-hash"}
    if with_refs:
        splits, held_out, dropped = split_by_book(records, test_size, valid_size)
        report.update(held_out_books=held_out, dropped_train_pairs_sharing_test_source=dropped)
    else:
        splits = split_by_hash(records, test_size, valid_size)
    for name in SPLITS:
        if name != "valid" and not splits[name]:
            raise ValueError(f"the {name} split is empty ({len(records)} pairs in all); "
                             f"lower --test-size/--valid-size or add data.")
    report["sizes"] = {name: len(splits[name]) for name in SPLITS}
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in SPLITS:
        if splits[name]:
            write_split(data_dir / f"{name}.jsonl.gz", splits[name], source_key, target_key)
    (data_dir / SPLIT_REPORT).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    sizes = ", ".join(f"{name} {count}" for name, count in report["sizes"].items())
    print(f"split ({report['method']}): {sizes} -> {data_dir}", flush=True)
    if with_refs:
        print(f"  held-out books: {', '.join(report['held_out_books'])}; dropped "
              f"{report['dropped_train_pairs_sharing_test_source']} training pairs whose "
              f"source also occurs in them", flush=True)
    return report
