"""Quickstart: the whole job on two CPU cores in a few minutes.

1. Generates a small English->German corpus with the package's own generator
   (numbers, dates, times, separable verbs, verb-final clauses; held-out
   sentences never appear in training).
2. Trains a small Transformer on it (`recipes/quickstart/config.yaml`).
3. Translates the held-out split with beam search and reports sacreBLEU,
   chrF and exact match.
4. Exports a SavedModel for TensorFlow Serving and translates a few sentences
   through the exported model, without Keras.

    python recipes/quickstart/run.py [--set training.max_minutes=2] [--min-bleu 80]

Run again to resume an interrupted training (checkpoints in runs/quickstart).
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ log lines stay hidden unless asked for (--verbose, or
# TF_CPP_MIN_LOG_LEVEL set by the user); this must happen before TensorFlow loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")

HERE = Path(__file__).resolve().parent
EXAMPLES = [
    "I have twenty-one apples.",
    "The train arrives at half past seven.",
    "I know that the man reads the book.",
    "Tomorrow I want to buy the red car.",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ log lines (hidden by default)")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="KEY=VALUE",
                        help="override a configuration key, e.g. training.max_minutes=2")
    parser.add_argument("--train-pairs", type=int, default=30000, help="generated training pairs")
    parser.add_argument("--test-pairs", type=int, default=500, help="held-out pairs")
    parser.add_argument("--min-bleu", type=float, default=None,
                        help="exit non-zero when the held-out BLEU is below this")
    args = parser.parse_args()

    from keras_transformer import config as config_lib
    from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl
    from keras_transformer.run import train as run_train, trained as run_trained

    config = config_lib.resolve([HERE / "config.yaml"], assignments=args.assignments)
    started = time.time()
    train_path, test_path = Path(config["data"]["train"]), Path(config["data"]["test"])
    if not (train_path.is_file() and test_path.is_file()):
        train, test = make_splits(args.train_pairs, args.test_pairs, seed=config["training"]["seed"])
        train_path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(train_path, train)
        write_jsonl(test_path, test)
        print(f"corpus: {len(train)} training and {len(test)} held-out pairs -> {train_path.parent}")

    output_dir = run_train.train(config)
    print(f"training done after {time.time() - started:.0f}s")
    from keras_transformer.run.plots import plot_training_curves

    print(f"training curves: {plot_training_curves(output_dir, Path(output_dir) / 'training_curves.png')}")

    result, samples = run_trained.evaluate(output_dir, progress=False)
    for source, hypothesis, reference in samples:
        print(f"  EN  {source}\n  DE  {hypothesis}\n  REF {reference}")
    print(f"held-out ({result['sentences']} sentences, beam {config['decoding']['beam_size']}): "
          f"BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f}, exact match {100 * result['exact_match']:.1f}%")
    print(f"  sacreBLEU signature: {result['bleu_signature']}")

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops, as TF Serving does)

    export_dir = run_trained.export(output_dir)
    served = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    outputs = served(text=tf.constant(EXAMPLES))
    print(f"exported SavedModel: {export_dir}; translations through it:")
    for source, translation in zip(EXAMPLES, outputs["translations"].numpy()):
        print(f"  {source}  ->  {translation.decode('utf-8')}")
    print(f"quickstart finished in {time.time() - started:.0f}s")
    if args.min_bleu is not None and result["bleu"] < args.min_bleu:
        print(f"BLEU {result['bleu']:.1f} is below --min-bleu {args.min_bleu}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
