"""Prepare WMT 2014 English-French as JSON lines ({"en": ..., "fr": ...}, gzip).

Two sources:

    # TensorFlow Datasets (pip install tensorflow-datasets; downloads ~36M pairs, several GB):
    python recipes/wmt14_en_fr/prepare.py tfds --out runs/wmt14_en_fr

    # Local files, one sentence a line, or newstest .sgm files:
    python recipes/wmt14_en_fr/prepare.py local --out runs/wmt14_en_fr \
        --train corpus.en corpus.fr --valid newstest2013.en newstest2013.fr \
        --test newstest2014-fren-src.en.sgm newstest2014-fren-ref.fr.sgm

Writes train.jsonl.gz, newstest2013.jsonl.gz (validation) and
newstest2014.jsonl.gz (test): the files `base.yaml` and `big.yaml` read.
Misaligned files, invalid UTF-8 and malformed .sgm files are reported with
the file and line; empty pairs are skipped and counted. The reading and
writing is shared with the English-German recipe (keras_transformer/data/wmt.py).
"""

import sys

from keras_transformer.data.wmt import EN_FR, local_pairs, prepare_main, read_sgm  # noqa: F401


def main(argv=None):
    return prepare_main(EN_FR, argv, description=__doc__, default_out="runs/wmt14_en_fr")


if __name__ == "__main__":
    sys.exit(main())
