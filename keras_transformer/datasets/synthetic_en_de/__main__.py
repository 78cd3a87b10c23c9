"""`python -m keras_transformer.datasets.synthetic_en_de --out DIR`."""

import argparse
import os

from keras_transformer.datasets.synthetic_en_de.sampling import CATEGORIES
from keras_transformer.datasets.synthetic_en_de.generate import make_splits
from keras_transformer.datasets.synthetic_en_de.generate import write_jsonl


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Write the synthetic English-German corpus as JSON lines.")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--train", type=int, default=30_000)
    parser.add_argument("--test", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--categories", nargs="*", default=None,
                        choices=CATEGORIES)
    args = parser.parse_args(argv)
    train, test = make_splits(args.train, args.test, args.seed,
                              args.categories, return_examples=True)
    for name, examples in (("train", train), ("test", test)):
        path = os.path.join(args.out, f"{name}.jsonl.gz")
        print(f"{path}: {write_jsonl(path, examples)} pairs")


if __name__ == "__main__":
    main()
