"""WMT 2014 corpora as JSON lines: read from TensorFlow Datasets or from local files.

The preparation shared by the WMT recipes (`recipes/wmt14_en_de`,
`recipes/wmt14_en_fr`): each recipe names its language pair (`WmtPair`) and
calls `prepare_main`, which writes `train.jsonl.gz`, `newstest2013.jsonl.gz`
(validation) and `newstest2014.jsonl.gz` (test) with one
`{"<source>": ..., "<target>": ...}` object a line.

Local files are one sentence a line (optionally gzipped) or WMT's newstest
`.sgm` files. Misaligned files, invalid UTF-8 and malformed `.sgm` files raise
`CorpusError` naming the file and line (the command line prints it and exits
with status 1); empty pairs are skipped and counted.
"""

import argparse
import html
import re
from dataclasses import dataclass
from pathlib import Path

from keras_transformer.data.corpus import CorpusError, iter_lines, read_text_pair
from keras_transformer.data.corpus import write_jsonl as write_records

SEGMENT = re.compile(r"<seg[^>]*>(.*)</seg>\s*$", re.IGNORECASE)

# Output file -> TensorFlow Datasets split of `wmt14_translate`.
SPLITS = {"train": "train", "newstest2013": "validation", "newstest2014": "test"}


@dataclass(frozen=True)
class WmtPair:
    """One WMT 2014 language pair: the JSON keys and where TFDS keeps it."""

    source: str  # e.g. "en"
    target: str  # e.g. "de"
    tfds_name: str  # e.g. "wmt14_translate/de-en"

    @property
    def keys(self):
        return (self.source, self.target)


EN_DE = WmtPair("en", "de", "wmt14_translate/de-en")
EN_FR = WmtPair("en", "fr", "wmt14_translate/fr-en")


def read_sgm(path):
    """The segments of a WMT .sgm file, in order; errors name the file and line."""
    segments = []
    for number, line in iter_lines(path):
        if "<seg" in line.lower():
            match = SEGMENT.search(line.strip())
            if not match:
                raise CorpusError(path, number, f"malformed <seg> line: {line.strip()[:80]!r}")
            segments.append(html.unescape(match.group(1)).strip())
    if not segments:
        raise CorpusError(path, None, "no <seg> lines found; is this a WMT .sgm file?")
    return segments


def is_sgm(path):
    return str(path).endswith((".sgm", ".sgm.gz"))


def local_pairs(source_path, target_path):
    """(source, target) pairs from two plain-text files (a stream: a
    training corpus of millions of pairs is never held) or two .sgm files
    (test sets, read whole)."""
    if is_sgm(source_path) != is_sgm(target_path):
        raise CorpusError(source_path, None, f"is paired with {target_path}, but only one of them is a .sgm "
                          "file; give two .sgm files or two plain-text files")
    if not is_sgm(source_path):
        return read_text_pair(source_path, target_path)
    source, target = read_sgm(source_path), read_sgm(target_path)
    if len(source) != len(target):
        raise CorpusError(source_path, None, f"has {len(source)} segments but {target_path} has {len(target)}")
    pairs = [(s, t) for s, t in zip(source, target) if s and t]
    print(f"{source_path} + {target_path}: {len(pairs)} pairs ({len(source) - len(pairs)} empty skipped)")
    return pairs


def tfds_pairs(pair, split):
    """(source, target) pairs of one split of `pair` from TensorFlow Datasets (downloads on first use)."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise SystemExit("the tfds source needs `pip install tensorflow-datasets`.") from None
    dataset = tfds.load(pair.tfds_name, split=split, as_supervised=False)
    for example in tfds.as_numpy(dataset):
        yield example[pair.source].decode("utf-8"), example[pair.target].decode("utf-8")


def write_pairs(path, pairs, pair):
    count = write_records(path, pairs, keys=pair.keys)
    print(f"wrote {count} pairs -> {path}")
    return count


def prepare_main(pair, argv=None, *, description=None, default_out=None):
    """The `prepare.py ... tfds|local` command line of a WMT recipe; returns the exit status."""
    source, target = pair.source.upper(), pair.target.upper()
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=["tfds", "local"], help="where the data comes from")
    parser.add_argument("--out", default=default_out or f"runs/wmt14_{pair.source}_{pair.target}",
                        help="output directory")
    parser.add_argument("--train", nargs=2, metavar=(source, target), help="local: training files")
    parser.add_argument("--valid", nargs=2, metavar=(source, target), help="local: newstest2013")
    parser.add_argument("--test", nargs=2, metavar=(source, target), help="local: newstest2014")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.source == "tfds":
        for name, split in SPLITS.items():
            write_pairs(out / f"{name}.jsonl.gz", tfds_pairs(pair, split), pair)
        return 0
    missing = [flag for flag in ("train", "valid", "test") if getattr(args, flag) is None]
    if missing:
        parser.error("local needs " + ", ".join(f"--{m} {source} {target}" for m in missing))
    for name, files in (("train", args.train), ("newstest2013", args.valid), ("newstest2014", args.test)):
        for path in files:
            if not Path(path).is_file():
                raise SystemExit(f"{path}: file not found")
        try:
            pairs = local_pairs(*files)
            write_pairs(out / f"{name}.jsonl.gz", pairs, pair)
        except CorpusError as error:
            raise SystemExit(str(error)) from None
        if hasattr(pairs, "stats"):
            print(f"{files[0]} + {files[1]}: {pairs.stats}")
    return 0
