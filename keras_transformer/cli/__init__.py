"""The `keras-transformer` command line.

    keras-transformer train --config run.yaml [--preset NAME] [--set training.epochs=3]
        (NAME: wmt14-base, wmt14-big, wmt14-en-fr-base, wmt14-en-fr-big, wsj-parsing)
    keras-transformer evaluate RUN_DIR [--corpus test.jsonl.gz]
    keras-transformer translate RUN_DIR [--input FILE | --text "..."] [--output FILE]
        [--n-best N] [--scores] [--alignments] [--format jsonl] [--prefix FILE]
        [--search sampling --temperature T --top-k K --top-p P --seed S] [--no-repeat-ngram-size N]
        [--shortlist RUN_DIR/shortlist.txt]
    keras-transformer shortlist RUN_DIR [--per-source 50] [--frequent 100] [--output FILE]
    keras-transformer score RUN_DIR --source FILE --target FILE [--per-token] [--format jsonl]
    keras-transformer export RUN_DIR [--base-dir DIR] [--name NAME] [--shortlist FILE [--jit-compile --shortlist-size N]]
    keras-transformer export RUN_DIR --format ctranslate2 [--quantization int8] [--output DIR]
    keras-transformer export RUN_DIR --format keras-hub [--output DIR]
    keras-transformer export RUN_DIR --format marian-hf [--output DIR]
    keras-transformer average-checkpoints CHECKPOINT_DIR --last 5 --output model.keras --run RUN_DIR
    keras-transformer attention RUN_DIR --text "..." --output attention.png
    keras-transformer plot RUN_DIR [--output curves.png]
    keras-transformer import SOURCE RUN_DIR [--force]
        (SOURCE: a MarianMT folder, an OPUS-MT release folder, or hf://OWNER/NAME)

Runs on the TensorFlow backend unless KERAS_BACKEND says otherwise (tf.data
and the tokenizer need TensorFlow; export needs the TensorFlow backend).
TensorFlow's C++ log lines are hidden unless `--verbose` is given (before or
after the command) or TF_CPP_MIN_LOG_LEVEL is set.

This package builds the parser and `main` (the console script's entry point,
also `python -m keras_transformer.cli`); `keras_transformer.cli.commands`
holds what each command does.
"""

import argparse
import sys

# The console script's defaults (KERAS_BACKEND=tensorflow, quiet TensorFlow
# start-up) are set by keras_transformer._startup, which runs before the
# package imports Keras; setting them here would come too late.

from keras_transformer.cli.commands import (
    cmd_attention, cmd_average, cmd_evaluate, cmd_export, cmd_import, cmd_plot, cmd_prepare, cmd_score, cmd_shortlist,
    cmd_train, cmd_translate,
)


def _config_arguments(parser):
    from keras_transformer import config as config_lib

    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="YAML or JSON configuration file (repeatable; later files win)")
    parser.add_argument("--preset", metavar="PRESET",
                        help="a named setup, the paper's: " + ", ".join(sorted(config_lib.RUN_PRESETS)))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments",
                        help="override one key, e.g. --set training.epochs=3 (repeatable)")
    parser.add_argument("--output-dir", help="same as --set output_dir=DIR")
    parser.add_argument("--train", help="same as --set data.train=FILE")


def _decoding_arguments(parser):
    parser.add_argument("--beam-size", type=int, help="beam size (1: greedy; default from the run, 4)")
    parser.add_argument("--alpha", type=float, help="length penalty exponent (default 0.6)")
    parser.add_argument("--length-penalty", choices=("gnmt", "length"),
                        help="how beams rank finished translations: gnmt (log P / ((5 + |Y|) / 6) ** alpha, the "
                             "paper's) or length (log P / |Y| ** alpha, Marian's and Transformers'); default from "
                             "the run's decoding.length_penalty")
    parser.add_argument("--max-extra-length", type=int, help="output length limit = input length + this")
    parser.add_argument("--batch-size", type=int, help="sentences per decoding batch")
    parser.add_argument("--target-language", metavar="CODE",
                        help="an imported multilingual Marian model: put >>CODE<< before every source (e.g. deu); "
                             "same as decoding.target_language")
    parser.add_argument("--limit-rule", choices=("fallback", "force_eos", "finish"),
                        help="a translation reaching its length limit without EOS: fallback (default: kept only "
                             "when none ended), force_eos (EOS forced at the limit) or finish (competes as it is, "
                             "CTranslate2's rule); default from the run's decoding.limit_rule")


def _quantizations():
    from keras_transformer.export.ctranslate2 import QUANTIZATIONS

    return QUANTIZATIONS


_VERBOSE_HELP = ("show TensorFlow's C++ log lines (hidden by default; read before TensorFlow loads, "
                 "so it applies to the console script and `python -m keras_transformer.cli`)")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="Train, evaluate, run and export Transformer translation models "
        "(Vaswani et al., 2017) on Keras 3.",
    )
    parser.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)
    # Also accepted after the command; SUPPRESS keeps a subcommand's default
    # from overwriting a --verbose given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_parser = commands.add_parser
    commands.add_parser = lambda *a, **k: add_parser(*a, parents=[common], **k)

    prepare = commands.add_parser(
        "prepare", help="turn the training corpus into a tokenizer and shards of token ids (once)",
        description="Prepare data.train once: train the tokenizer on a sample read while the corpus streams by, "
        "tokenize on all cores, and write shards of token ids with a manifest to data.prepared_dir (default "
        "OUTPUT_DIR/prepared). Running it again over unchanged inputs does nothing; a changed input is named and "
        "prepared again. `train` calls it on first use. A start checks the shards by size and modification time; "
        "--verify computes every file's SHA-256.")
    _config_arguments(prepare)
    prepare.add_argument("--verify", action="store_true",
                         help="check every prepared file's SHA-256 (a start checks only those whose size or "
                         "modification time changed)")
    prepare.set_defaults(func=cmd_prepare)

    train = commands.add_parser(
        "train", help="train a model (resumes when output_dir has checkpoints)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train a model. Running it again on the same output_dir resumes from the newest checkpoint, "
        "with the batch it would have seen next.",
        epilog="Large corpora: the training corpus is prepared once into shards of token ids\n"
        "(`keras-transformer prepare`, or the first `train`), then streamed with a global shuffle in\n"
        "bounded memory; a start or a resume at any step reads no earlier batch. For WMT-sized data:\n"
        "  keras-transformer prepare --preset wmt14-base --train wmt14.en-de.tsv --output-dir runs/wmt\n"
        "  keras-transformer train   --preset wmt14-base --train wmt14.en-de.tsv --output-dir runs/wmt\n"
        "Several runs can share prepared data: --set data.prepared_dir=DIR.")
    _config_arguments(train)
    train.add_argument("--print-config", action="store_true", help="print the resolved configuration and exit")
    train.add_argument("--init-from", metavar="RUN_OR_MODEL",
                       help="fine-tune: start from a run's model and tokenizer (an imported run's too, or a .keras "
                            "file beside its tokenizer); same as --set training.init_from=...")
    train.add_argument("--init-optimizer", choices=("reset", "keep"),
                       help="with --init-from: reset (default) starts the optimizer and learning-rate schedule "
                            "afresh, with a new warm-up of training.warmup_steps; keep continues the source run's "
                            "optimizer state and schedule from its newest checkpoint; same as --set "
                            "training.init_optimizer=...")
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
    translate.add_argument("--n-best", type=int, help="the N best translations of each source (N <= beam size), "
                           "as lines 'INDEX ||| translation ||| score ||| log_prob'")
    translate.add_argument("--scores", action="store_true",
                           help="append ' ||| score ||| log_prob' (length-penalised score, log-probability)")
    translate.add_argument("--alignments", action="store_true",
                           help="append ' ||| alignment': Pharaoh word links 'source-target' from cross-attention")
    translate.add_argument("--format", choices=("text", "jsonl"), default="text",
                           help="text (default) or one JSON object per translation (index, rank, translation, "
                                "score, log_prob, truncated: the source was cut to data.max_length, source)")
    translate.add_argument("--prefix", metavar="FILE",
                           help="a target prefix per source line (empty line: none), forced at the start")
    translate.add_argument("--search", choices=("beam", "greedy", "sampling"),
                           help="default: beam, or greedy with --beam-size 1")
    translate.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    translate.add_argument("--top-k", type=int, default=0, help="sample among the k most probable tokens (0: all)")
    translate.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold")
    translate.add_argument("--seed", type=int, help="sampling seed (same seed, same samples)")
    translate.add_argument("--no-repeat-ngram-size", type=int, help="forbid repeating any n-gram of this size")
    translate.add_argument("--shortlist", metavar="FILE",
                           help="score only the target pieces a vocabulary shortlist lists for each batch "
                                "(written by `keras-transformer shortlist`)")
    _decoding_arguments(translate)
    translate.set_defaults(func=cmd_translate)

    score = commands.add_parser("score", help="log-probabilities of given translations (forced decoding)")
    score.add_argument("run_dir", help="the run's output_dir")
    score.add_argument("--source", required=True, help="source sentences, one per line")
    score.add_argument("--target", required=True, help="their translations, one per line")
    score.add_argument("--per-token", action="store_true", help="also each token's log-probability")
    score.add_argument("--format", choices=("text", "jsonl"), default="text",
                       help="text: 'log_prob ||| tokens ||| score' per line (default), or JSON lines")
    score.add_argument("--output", help="write here (default: stdout)")
    score.add_argument("--alpha", type=float, help="length penalty exponent of the normalised score")
    score.add_argument("--length-penalty", choices=("gnmt", "length"),
                       help="the normalised score's rule: gnmt (log P / ((5 + |Y|) / 6) ** alpha) or length "
                            "(log P / |Y| ** alpha); default from the run's decoding.length_penalty")
    score.add_argument("--batch-size", type=int, help="pairs per batch")
    score.add_argument("--target-language", metavar="CODE",
                       help="an imported multilingual Marian model: put >>CODE<< before every source")
    score.set_defaults(func=cmd_score)

    export = commands.add_parser("export", help="export a SavedModel for TensorFlow Serving")
    export.add_argument("run_dir", help="the run's output_dir")
    export.add_argument("--base-dir", help="model base path (default RUN_DIR/export)")
    export.add_argument("--name", default="translator", help="model name (directory under --base-dir)")
    export.add_argument("--version", type=int, help="version number (default: next free)")
    export.add_argument("--format", choices=("saved_model", "ctranslate2", "keras-hub", "marian-hf"),
                        default="saved_model",
                        help="saved_model (TensorFlow Serving, default), ctranslate2 (needs the "
                             "ctranslate2 extra), keras-hub (a KerasHub preset folder; needs the hub extra) or "
                             "marian-hf (a Transformers MarianMT folder; needs safetensors)")
    export.add_argument("--quantization", choices=_quantizations(),
                        help="CTranslate2 weight type (default float32)")
    export.add_argument("--output", help="CTranslate2 model directory (default RUN_DIR/export/ctranslate2-QUANTIZATION) "
                                         "or KerasHub preset directory (default RUN_DIR/export/keras-hub) "
                                         "or MarianMT directory (default RUN_DIR/export/marian-hf)")
    export.add_argument("--force", action="store_true",
                        help="replace an existing CTranslate2, KerasHub or MarianMT directory")
    # --xla: the flag's former name, still accepted (the switch is jit_compile everywhere else).
    export.add_argument("--jit-compile", "--xla", dest="jit_compile", action="store_true",
                        help="SavedModel whose search is compiled with XLA (2-3x faster on CPU): for TF "
                             "Serving with --xla_cpu_compilation_enabled, or GPU; stock servers need the default "
                             "(--xla is its former name)")
    export.add_argument("--quantize", choices=("int8", "int8_weights", "bfloat16"),
                        help="lower-precision weights: int8 (Keras int8 quantization of the Dense layers and "
                             "the shared embedding) quantizes activations at run time too, int8_weights "
                             "multiplies in float32 (with --format ctranslate2 the engine gets the int8 kernels "
                             "as they are); bfloat16: weights and compute in bfloat16 (SavedModel only)")
    export.add_argument("--shortlist", metavar="FILE",
                        help="bake a vocabulary shortlist (written by `keras-transformer shortlist`) into the "
                             "SavedModel: each request scores only its candidate target pieces")
    export.add_argument("--shortlist-size", type=int, metavar="N",
                        help="with --shortlist and --jit-compile: the compiled list's fixed size (a request whose "
                             "candidates exceed it takes the full search); default: the list's always-kept "
                             "pieces plus 100 source pieces' lists, to a multiple of 128")
    export.add_argument("--xla-min-rows", type=int, choices=(1, 2, 4, 8),
                        help="with --jit-compile: the smallest padded row count (default 8); 1 lets a one-sentence "
                             "request run one row, at the price of more programs for the warm-up to compile")
    export.add_argument("--xla-phase-buckets", type=int,
                        help="with --jit-compile: each decoding phase after the first runs on the smallest of N row "
                             "buckets (the request, half, a quarter, ...) that holds the sentences not done "
                             "(default 1: the whole request in every phase); more to compile at warm-up, the same outputs")
    export.add_argument("--finer-phases", action="store_true",
                        help="the plain variant decodes in finer phases (a boundary every 8 positions up to 64, then "
                             "16), dropping done sentences at each: faster on real text, the same outputs, a larger "
                             "graph (benchmarks/README.md)")
    export.add_argument("--warmup-rows", type=int,
                        help="TF Serving warm-up records cover requests of up to this many rows (default 64): "
                             "with --jit-compile, one per padded (rows, length) shape the server will compile")
    _decoding_arguments(export)
    export.set_defaults(func=cmd_export)

    shortlist = commands.add_parser("shortlist", help="build a vocabulary shortlist from the run's training corpus")
    shortlist.add_argument("run_dir", help="the run's output_dir")
    shortlist.add_argument("--output", help="the shortlist file (default RUN_DIR/shortlist.txt)")
    shortlist.add_argument("--per-source", type=int, default=50, help="target pieces kept per source piece")
    shortlist.add_argument("--frequent", type=int, default=100, help="most frequent target pieces always kept")
    shortlist.set_defaults(func=cmd_shortlist)

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

    import_ = commands.add_parser(
        "import", help="a pretrained MarianMT / OPUS-MT model as a run directory",
        description="Import a pretrained Marian translation model (OPUS-MT, MarianMT) as an ordinary run "
        "directory that translate, evaluate, score, attention and export take. SOURCE is a Transformers MarianMT "
        "folder (config.json, model.safetensors or tf_model.h5, source.spm, target.spm, vocab.json), an OPUS-MT "
        "release folder (Marian .npz, *.spm, *.vocab.yml, decoder.yml) or hf://OWNER/NAME (downloaded with "
        "huggingface_hub). Pickled weights (pytorch_model.bin) are never loaded. RUN_DIR appears whole or not at "
        "all.")
    import_.add_argument("source", help="a MarianMT folder, an OPUS-MT release folder, or hf://OWNER/NAME")
    import_.add_argument("run_dir", help="the run directory to write (new or empty, unless --force)")
    import_.add_argument("--force", action="store_true", help="replace an existing non-empty RUN_DIR")
    import_.set_defaults(func=cmd_import)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    from keras_transformer.config import ConfigError
    from keras_transformer.run.data import RunError

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

