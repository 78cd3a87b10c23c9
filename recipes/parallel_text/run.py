"""Train and evaluate a Transformer on any parallel corpus.

    python recipes/parallel_text/run.py ../shared/data/ddtp_en_de.jsonl.gz
    python recipes/parallel_text/run.py ../shared/data/bible_en_es.jsonl.gz \\
        --target-key es --holdout-by ref-book --output-dir runs/bible_en_es
    python recipes/parallel_text/run.py corpus.tsv --pair train.en train.de --set training.max_minutes=10

Inputs: JSON lines (`.jsonl`, `.json`, `.ndjson`, optionally `.gz`; the
sentences under `--source-key`/`--target-key`), TSV (`.tsv[.gz]`, source in
the first column, target in the second) and aligned plain-text files
(`--pair SOURCE TARGET`). Several inputs are concatenated.

Splits (written to OUTPUT_DIR/data/{train,valid,test}.jsonl.gz, with a report
in OUTPUT_DIR/data/split.json):
  * default: a deterministic split by a hash of the source sentence, so that a
    sentence repeated in the corpus never lands in two splits;
  * `--holdout-by ref-book` (JSON lines with a `ref` such as "Genesis 1:1"):
    whole books (the part of `ref` before the last space) go to the test split
    and never into training; training pairs whose source sentence also occurs
    in a held-out book are dropped. The validation split is then hashed out
    of the remaining books.

Then trains (`recipes/parallel_text/config.yaml` < `--config` files < `--set`
overrides), evaluates the test split with beam search and prints sacreBLEU,
chrF and exact match. Run again to resume an interrupted training.
"""

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve().parent
SPLITS = ("train", "valid", "test")


def is_jsonl(path):
    from keras_transformer.data.corpus import is_jsonl as corpus_is_jsonl

    return corpus_is_jsonl(path)


def book_of(ref):
    """'1 Kings 2:3' -> '1 Kings' (the part before the last space); '' if none."""
    book, space, _ = ref.strip().rpartition(" ")
    return book.strip() if space else ""


def read_records(inputs, text_pairs=(), source_key="en", target_key="de", max_chars=None, with_refs=False):
    """Reads every input; returns (records, per-file stats) with records `(source, target, ref)`.

    Empty pairs and pairs with a side over `max_chars` are dropped and counted.
    """
    from keras_transformer.data.corpus import CorpusError, CorpusStats, PairFilter, open_corpus, read_jsonl

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


def write_split(path, records, source_key, target_key):
    from keras_transformer.data.corpus import write_jsonl

    rows = ({source_key: source, target_key: target, **({"ref": ref} if ref is not None else {})}
            for source, target, ref in records)
    write_jsonl(path, rows)


def prepare(args, config):
    """Reads the inputs, splits them and writes OUTPUT_DIR/data; returns the report."""
    data = config["data"]
    with_refs = args.holdout_by == "ref-book"
    records, files = read_records(args.corpora, args.pairs, data["source_key"], data["target_key"],
                                  data["max_chars"], with_refs=with_refs)
    if not records:
        raise ValueError("the inputs hold no usable sentence pairs.")
    report = {"inputs": files, "source_key": data["source_key"], "target_key": data["target_key"],
              "method": "ref-book" if with_refs else "source-hash"}
    if with_refs:
        splits, held_out, dropped = split_by_book(records, args.test_size, args.valid_size)
        report.update(held_out_books=held_out, dropped_train_pairs_sharing_test_source=dropped)
    else:
        splits = split_by_hash(records, args.test_size, args.valid_size)
    for name in SPLITS:
        if name != "valid" and not splits[name]:
            raise ValueError(f"the {name} split is empty ({len(records)} pairs in all); "
                             f"lower --test-size/--valid-size or add data.")
    report["sizes"] = {name: len(splits[name]) for name in SPLITS}
    data_dir = Path(config["output_dir"]) / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in SPLITS:
        if splits[name]:
            write_split(data_dir / f"{name}.jsonl.gz", splits[name], data["source_key"], data["target_key"])
    (data_dir / "split.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    sizes = ", ".join(f"{name} {count}" for name, count in report["sizes"].items())
    print(f"split ({report['method']}): {sizes} -> {data_dir}", flush=True)
    if with_refs:
        print(f"  held-out books: {', '.join(held_out)}; dropped {dropped} training pairs whose "
              f"source also occurs in them", flush=True)
    return report


def cpu_has_bfloat16():
    """True when the CPU advertises bfloat16 arithmetic (AVX512-BF16 or AMX-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def choose_precision(config, assignments, config_lib):
    """mixed_bfloat16 where the CPU computes in bfloat16 natively, float32 elsewhere,
    unless --set training.mixed_precision=... chose; prints the choice and why."""
    if any(a.split("=", 1)[0].strip() == "training.mixed_precision" for a in assignments):
        print(f"precision: {config['training']['mixed_precision'] or 'float32'} (--set)", flush=True)
        return config
    if cpu_has_bfloat16():
        print("precision: mixed_bfloat16 (this CPU has bfloat16 units: 1.3-1.5x more steps in "
              "benchmarks/quality.py)", flush=True)
        return config_lib.merge(config, {"training": {"mixed_precision": "mixed_bfloat16"}}, origin="recipe")
    print("precision: float32 (no bfloat16 units on this CPU, where bfloat16 would be emulated)", flush=True)
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="*", metavar="CORPUS", help=".jsonl[.gz] or .tsv[.gz] files")
    parser.add_argument("--pair", nargs=2, action="append", default=[], dest="pairs", metavar=("SOURCE", "TARGET"),
                        help="two aligned plain-text files, one sentence a line")
    parser.add_argument("--source-key", help="JSON lines: key of the source sentence (default: data.source_key, en)")
    parser.add_argument("--target-key", help="JSON lines: key of the target sentence (default: data.target_key, de)")
    parser.add_argument("--output-dir", help="run directory (default: output_dir of the config, runs/parallel_text)")
    parser.add_argument("--test-size", type=int, default=1000, help="held-out test pairs (default %(default)s)")
    parser.add_argument("--valid-size", type=int, default=500, help="validation pairs; 0: none (default %(default)s)")
    parser.add_argument("--holdout-by", choices=["ref-book"],
                        help="ref-book: hold out whole books of a JSON-lines `ref` field ('Genesis 1:1')")
    parser.add_argument("--config", action="append", default=[], help="extra YAML/JSON configuration (repeatable)")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="KEY=VALUE",
                        help="override a configuration key, e.g. training.max_minutes=10")
    args = parser.parse_args(argv)
    if not args.corpora and not args.pairs:
        parser.error("give at least one CORPUS file or --pair SOURCE TARGET.")
    if args.test_size < 1 or args.valid_size < 0:
        parser.error("--test-size must be >= 1 and --valid-size >= 0.")

    from keras_transformer import config as config_lib
    from keras_transformer import runs
    from keras_transformer.data.corpus import CorpusError

    started = time.time()
    try:
        config = config_lib.resolve([HERE / "config.yaml", *args.config], assignments=args.assignments)
        overrides = {"data": {k: v for k, v in (("source_key", args.source_key), ("target_key", args.target_key)) if v}}
        if args.output_dir:
            overrides["output_dir"] = args.output_dir
        config = config_lib.merge(config, overrides, origin="command line")
        report = prepare(args, config)
    except (CorpusError, config_lib.ConfigError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    data_dir = Path(config["output_dir"]) / "data"
    paths = {name: str(data_dir / f"{name}.jsonl.gz") for name in SPLITS}
    if not report["sizes"]["valid"]:
        paths["valid"] = None
    config = config_lib.merge(
        config, {"data": {**paths, "train_target": None, "valid_target": None, "test_target": None}}, origin="recipe"
    )
    config = choose_precision(config, args.assignments, config_lib)
    training, model = config["training"], config["model"]
    print(f"settings: {'pre' if model.get('norm_first') else 'post'}-LN, {training['tokens_per_batch']}-token "
          f"batches, warm-up {training['warmup_steps']}, learning-rate scale {training['learning_rate_scale']}, "
          f"{training['max_minutes']} minutes (recipes/parallel_text/config.yaml says why)", flush=True)
    try:
        output_dir = runs.train(config)
        print(f"training done after {time.time() - started:.0f}s", flush=True)
        result, samples = runs.evaluate(output_dir, progress=False)
    except runs.RunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for source, hypothesis, reference in samples[:3]:
        print(f"  SRC {source}\n  HYP {hypothesis}\n  REF {reference}")
    print(f"test ({result['sentences']} sentences, beam {config['decoding']['beam_size']}): "
          f"BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f}, exact match {100 * result['exact_match']:.1f}%")
    print(f"  sacreBLEU signature: {result['bleu_signature']}")
    print(f"finished in {time.time() - started:.0f}s; scores in {Path(output_dir) / 'eval.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
