"""Prepare WMT 2014 English-German as JSON lines ({"en": ..., "de": ...}, gzip).

Two sources:

    # TensorFlow Datasets (pip install tensorflow-datasets; downloads ~1.4 GB):
    python recipes/wmt14_en_de/prepare.py tfds --out runs/wmt14_en_de

    # Local files, one sentence a line, or newstest .sgm files:
    python recipes/wmt14_en_de/prepare.py local --out runs/wmt14_en_de \
        --train corpus.en corpus.de --valid newstest2013.en newstest2013.de \
        --test newstest2014-deen-src.en.sgm newstest2014-deen-ref.de.sgm

Writes train.jsonl.gz, newstest2013.jsonl.gz (validation) and
newstest2014.jsonl.gz (test): the files `base.yaml` and `big.yaml` read.
Misaligned files, invalid UTF-8 and malformed .sgm files are reported with
the file and line; empty pairs are skipped and counted.
"""

import argparse
import gzip
import html
import re
import sys
from pathlib import Path

SEGMENT = re.compile(r"<seg[^>]*>(.*)</seg>\s*$", re.IGNORECASE)


def read_sgm(path):
    """The segments of a WMT .sgm file, in order; errors name the file and line."""
    segments = []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as stream:
        for number, raw in enumerate(stream, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise SystemExit(f"{path}:{number}: invalid UTF-8 ({error.reason})") from None
            if "<seg" in line.lower():
                match = SEGMENT.search(line.strip())
                if not match:
                    raise SystemExit(f"{path}:{number}: malformed <seg> line: {line.strip()[:80]!r}")
                segments.append(html.unescape(match.group(1)).strip())
    if not segments:
        raise SystemExit(f"{path}: no <seg> lines found; is this a WMT .sgm file?")
    return segments


def read_side(path):
    if str(path).endswith((".sgm", ".sgm.gz")):
        return read_sgm(path)
    return None


def local_pairs(source_path, target_path):
    """(en, de) pairs from two plain-text or two .sgm files."""
    source, target = read_side(source_path), read_side(target_path)
    if source is None and target is None:
        from keras_transformer.data import read_text_pair

        pairs, stats = read_text_pair(source_path, target_path).load()
        print(f"{source_path} + {target_path}: {stats}")
        return pairs
    if source is None or target is None:
        raise SystemExit(f"{source_path}, {target_path}: give two .sgm files or two plain-text files.")
    if len(source) != len(target):
        raise SystemExit(
            f"{source_path} has {len(source)} segments but {target_path} has {len(target)}."
        )
    pairs = [(s, t) for s, t in zip(source, target) if s and t]
    print(f"{source_path} + {target_path}: {len(pairs)} pairs ({len(source) - len(pairs)} empty skipped)")
    return pairs


def tfds_pairs(split):
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise SystemExit("the tfds source needs `pip install tensorflow-datasets`.") from None
    dataset = tfds.load("wmt14_translate/de-en", split=split, as_supervised=False)
    for example in tfds.as_numpy(dataset):
        yield example["en"].decode("utf-8"), example["de"].decode("utf-8")


def write_jsonl(path, pairs):
    from keras_transformer.data.corpus import write_jsonl as write_records

    count = write_records(path, pairs, keys=("en", "de"))
    print(f"wrote {count} pairs -> {path}")
    return count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=["tfds", "local"], help="where the data comes from")
    parser.add_argument("--out", default="runs/wmt14_en_de", help="output directory")
    parser.add_argument("--train", nargs=2, metavar=("EN", "DE"), help="local: training files")
    parser.add_argument("--valid", nargs=2, metavar=("EN", "DE"), help="local: newstest2013")
    parser.add_argument("--test", nargs=2, metavar=("EN", "DE"), help="local: newstest2014")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.source == "tfds":
        splits = {"train": "train", "newstest2013": "validation", "newstest2014": "test"}
        for name, split in splits.items():
            write_jsonl(out / f"{name}.jsonl.gz", tfds_pairs(split))
        return 0
    missing = [flag for flag in ("train", "valid", "test") if getattr(args, flag) is None]
    if missing:
        parser.error("local needs " + ", ".join(f"--{m} EN DE" for m in missing))
    for name, files in (("train", args.train), ("newstest2013", args.valid), ("newstest2014", args.test)):
        for path in files:
            if not Path(path).is_file():
                raise SystemExit(f"{path}: file not found")
        write_jsonl(out / f"{name}.jsonl.gz", local_pairs(*files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
