"""The `keras-transformer` command line.

    keras-transformer train --config run.yaml [--preset wmt14-base] [--set training.epochs=3]
    keras-transformer evaluate RUN_DIR [--corpus test.jsonl.gz]
    keras-transformer translate RUN_DIR [--input FILE | --text "..."] [--output FILE]
    keras-transformer export RUN_DIR [--base-dir DIR] [--name NAME]
    keras-transformer average-checkpoints CHECKPOINT_DIR --last 5 --output model.keras --run RUN_DIR
    keras-transformer attention RUN_DIR --text "..." --output attention.png
    keras-transformer plot RUN_DIR [--output curves.png]

Runs on the TensorFlow backend unless KERAS_BACKEND says otherwise (tf.data
and the tokenizer need TensorFlow; export needs the TensorFlow backend).
"""

import argparse
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _config_arguments(parser):
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="YAML or JSON configuration file (repeatable; later files win)")
    parser.add_argument("--preset", help="a named setup: wmt14-base or wmt14-big (the paper's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments",
                        help="override one key, e.g. --set training.epochs=3 (repeatable)")
    parser.add_argument("--output-dir", help="same as --set output_dir=DIR")
    parser.add_argument("--train", help="same as --set data.train=FILE")


def _decoding_arguments(parser):
    parser.add_argument("--beam-size", type=int, help="beam size (1: greedy; default from the run, 4)")
    parser.add_argument("--alpha", type=float, help="length penalty exponent (default 0.6)")
    parser.add_argument("--max-extra-length", type=int, help="output length limit = input length + this")
    parser.add_argument("--batch-size", type=int, help="sentences per decoding batch")


def _apply_decoding(config, args):
    from keras_transformer import config as config_lib

    return config_lib.merge(config, {"decoding": _decoding_overrides(args)}, origin="decoding flags")


def _resolve(args):
    from keras_transformer import config as config_lib

    assignments = list(args.assignments)
    if args.output_dir:
        assignments.append(f"output_dir={args.output_dir}")
    if args.train:
        assignments.append(f"data.train={args.train}")
    return config_lib.resolve(args.config, args.preset, assignments)


def cmd_train(args):
    from keras_transformer import runs

    config = _resolve(args)
    if args.print_config:
        print(json.dumps(config, indent=2))
        return 0
    output_dir = runs.train(config)
    print(f"done: {output_dir}")
    return 0


def _decoding_overrides(args):
    keys = ("beam_size", "alpha", "max_extra_length", "batch_size")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def cmd_evaluate(args):
    from keras_transformer import runs

    result, samples = runs.evaluate(
        args.run_dir, args.corpus, args.corpus_target, limit=args.limit,
        decoding=_decoding_overrides(args),
    )
    for source, hypothesis, reference in samples:
        print(f"SRC {source}\nHYP {hypothesis}\nREF {reference}\n")
    print(f"{result['sentences']} sentences: BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  "
          f"exact match {100 * result['exact_match']:.1f}%")
    print(f"signature: {result.get('bleu_signature', '')}")
    return 0


def cmd_translate(args):
    from keras_transformer import runs

    model, tokenizer, config = runs.load_run(args.run_dir)
    config = _apply_decoding(config, args)
    if args.text:
        texts = list(args.text)
    else:
        stream = open(args.input, encoding="utf-8") if args.input else sys.stdin
        with stream:
            texts = [line.rstrip("\r\n") for line in stream]
    outputs = runs.translate_texts(
        model, tokenizer, texts, config["decoding"], progress=len(texts) > 100,
        max_source_length=config["data"]["max_length"],
    )
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for line in outputs:
            out.write(line + "\n")
    finally:
        if args.output:
            out.close()
    return 0


def cmd_export(args):
    from keras_transformer import runs
    from keras_transformer.export import export_saved_model

    model, tokenizer, config = runs.load_run(args.run_dir)
    config = _apply_decoding(config, args)
    base_dir = args.base_dir or os.path.join(args.run_dir, "export")
    decoding = config["decoding"]
    path = export_saved_model(
        model, tokenizer, base_dir, name=args.name, version=args.version,
        beam_size=decoding["beam_size"], alpha=decoding["alpha"],
        max_extra_length=decoding["max_extra_length"],
        # The longest source seen in training; longer inputs are truncated.
        max_input_length=config["data"]["max_length"],
    )
    print(f"exported: {path}")
    return 0


def cmd_average(args):
    import keras

    from keras_transformer import runs
    from keras_transformer.training import save_averaged_model

    if args.run:
        model = runs.load_model(args.run)
    elif args.model:
        model = keras.saving.load_model(args.model)
    else:
        raise SystemExit("average-checkpoints: give --run RUN_DIR or --model FILE.keras "
                         "(the architecture the checkpoints belong to).")
    save_averaged_model(model, args.checkpoint_dir, args.output, last_n=args.last)
    print(f"averaged the last {args.last} checkpoints of {args.checkpoint_dir} -> {args.output}")
    return 0


def cmd_attention(args):
    from keras_transformer import runs
    from keras_transformer.plots import plot_cross_attention

    model, tokenizer, config = runs.load_run(args.run_dir)
    target = args.target
    if target is None:
        target = runs.translate_texts(model, tokenizer, [args.text], config["decoding"])[0]
    path = plot_cross_attention(model, tokenizer, args.text, target, args.output, layer=args.layer)
    print(f"{args.text}\n-> {target}\nattention heatmap: {path}")
    return 0


def cmd_plot(args):
    from keras_transformer.plots import plot_training_curves

    output = args.output or os.path.join(args.run_dir, "training_curves.png")
    print(f"training curves: {plot_training_curves(args.run_dir, output)}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="Train, evaluate, run and export Transformer translation models "
        "(Vaswani et al., 2017) on Keras 3.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser("train", help="train a model (resumes when output_dir has checkpoints)",
                                description="Train a model. Running it again on the same output_dir "
                                "resumes from the newest checkpoint.")
    _config_arguments(train)
    train.add_argument("--print-config", action="store_true", help="print the resolved configuration and exit")
    train.set_defaults(func=cmd_train)

    evaluate = commands.add_parser("evaluate", help="translate a test corpus and report sacreBLEU and chrF")
    evaluate.add_argument("run_dir", help="the run's output_dir")
    evaluate.add_argument("--corpus", help="test corpus (default: the run's data.test)")
    evaluate.add_argument("--corpus-target", help="target side of a plain-text test pair")
    evaluate.add_argument("--limit", type=int, help="only the first N sentences")
    _decoding_arguments(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)

    translate = commands.add_parser("translate", help="translate sentences (one per line)")
    translate.add_argument("run_dir", help="the run's output_dir")
    translate.add_argument("--text", action="append", help="a sentence (repeatable)")
    translate.add_argument("--input", help="a file with one sentence per line (default: stdin)")
    translate.add_argument("--output", help="write translations here (default: stdout)")
    _decoding_arguments(translate)
    translate.set_defaults(func=cmd_translate)

    export = commands.add_parser("export", help="export a SavedModel for TensorFlow Serving")
    export.add_argument("run_dir", help="the run's output_dir")
    export.add_argument("--base-dir", help="model base path (default RUN_DIR/export)")
    export.add_argument("--name", default="translator", help="model name (directory under --base-dir)")
    export.add_argument("--version", type=int, help="version number (default: next free)")
    _decoding_arguments(export)
    export.set_defaults(func=cmd_export)

    average = commands.add_parser("average-checkpoints", help="average the last N checkpoints into one model")
    average.add_argument("checkpoint_dir", help="directory of ckpt-*.weights.h5 files")
    average.add_argument("--last", type=int, default=5, help="how many (paper: 5 base, 20 big)")
    average.add_argument("--output", required=True, help="the averaged .keras model to write")
    average.add_argument("--run", help="run directory whose model.keras gives the architecture")
    average.add_argument("--model", help="a .keras model file giving the architecture")
    average.set_defaults(func=cmd_average)

    attention = commands.add_parser("attention", help="plot encoder-decoder attention as a PNG heatmap")
    attention.add_argument("run_dir", help="the run's output_dir")
    attention.add_argument("--text", required=True, help="the source sentence")
    attention.add_argument("--target", help="the target sentence (default: the model's translation)")
    attention.add_argument("--layer", type=int, default=-1, help="decoder layer (default: the last)")
    attention.add_argument("--output", default="attention.png", help="PNG file to write")
    _decoding_arguments(attention)
    attention.set_defaults(func=cmd_attention)

    plot = commands.add_parser("plot", help="plot loss, validation BLEU/chrF and learning rate against step (PNG)")
    plot.add_argument("run_dir", help="the run's output_dir")
    plot.add_argument("--output", help="PNG file to write (default RUN_DIR/training_curves.png)")
    plot.set_defaults(func=cmd_plot)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    from keras_transformer.config import ConfigError
    from keras_transformer.runs import RunError

    try:
        return args.func(args)
    except (ConfigError, RunError) as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except FileNotFoundError as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # CorpusError and argument errors name file/line/argument
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
