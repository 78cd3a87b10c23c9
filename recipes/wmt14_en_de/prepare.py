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
the file and line; empty pairs are skipped and counted. The reading and
writing is shared with the English-French recipe (keras_transformer/data/wmt.py).
"""

import sys

from keras_transformer.data.wmt import EN_DE, local_pairs, prepare_main, read_sgm  # noqa: F401


def main(argv=None):
    return prepare_main(EN_DE, argv, description=__doc__, default_out="runs/wmt14_en_de")


if __name__ == "__main__":
    sys.exit(main())
