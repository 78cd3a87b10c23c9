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
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ log lines stay hidden unless asked for (--verbose, or
# TF_CPP_MIN_LOG_LEVEL set by the user); this must happen before TensorFlow loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")

HERE = Path(__file__).resolve().parent
SPLITS = ("train", "valid", "test")


def prepare(args, config):
    """Reads the inputs, splits them (`keras_transformer.data.splits`) and
    writes OUTPUT_DIR/data; returns the report."""
    from keras_transformer.data.splits import prepare as prepare_splits

    data = config["data"]
    return prepare_splits(Path(config["output_dir"]) / "data", args.corpora, args.pairs,
                          source_key=data["source_key"], target_key=data["target_key"],
                          max_chars=data["max_chars"], test_size=args.test_size, valid_size=args.valid_size,
                          holdout_by=args.holdout_by)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ log lines (hidden by default)")
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
    from keras_transformer.data.corpus import CorpusError
    from keras_transformer.run import data as run_data, train as run_train, trained as run_trained
    from keras_transformer.training.precision import choose_precision

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
    config = choose_precision(config, args.assignments)
    training, model = config["training"], config["model"]
    print(f"settings: {'pre' if model.get('norm_first') else 'post'}-LN, {training['tokens_per_batch']}-token "
          f"batches, warm-up {training['warmup_steps']}, learning-rate scale {training['learning_rate_scale']}, "
          f"{training['max_minutes']} minutes (recipes/parallel_text/config.yaml says why)", flush=True)
    try:
        output_dir = run_train.train(config)
        print(f"training done after {time.time() - started:.0f}s", flush=True)
        result, samples = run_trained.evaluate(output_dir, progress=False)
    except run_data.RunError as error:
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
