"""Fine-tuning: a model trained on one corpus, adapted to a second one.

    python recipes/fine_tuning/run.py
    python recipes/fine_tuning/run.py --base-corpus general.jsonl.gz --new-corpus medical.jsonl.gz
    python recipes/fine_tuning/run.py --base-run runs/ddtp_en_de --finetune-set training.warmup_steps=100

Stages, each in its own directory under --output-dir (runs/fine_tuning):

  base/            the base corpus (--base-corpus, default
                   ../shared/data/ddtp_en_de.jsonl.gz) split as
                   recipes/parallel_text splits it (base/data/), and a model
                   trained on its training split; with --base-run DIR, that
                   trained run instead (any run directory: an imported
                   OPUS-MT model's too, see recipes/opus_mt).
  fine_tuned/      the new corpus (--new-corpus, default
                   ../shared/data/po_all.jsonl.gz) split the same way
                   (fine_tuned/data/), and the base model trained further on
                   its training split (training.init_from: the base run's
                   weights and tokenizer; optimizer and schedule afresh).
  scores/          BLEU and chrF on the new corpus's test split before
                   (base model) and after (fine-tuned model) fine-tuning,
                   and on the base corpus's test split too, which shows what
                   the fine-tuned model forgot (not with --base-run).

The models use recipes/parallel_text/config.yaml (< --config files < --set
overrides, for both models; --finetune-set for the fine-tuning only, e.g.
training.warmup_steps). Each training gets --minutes-per-stage minutes
(default: the configuration's training.max_minutes) or --set
training.max_steps=N.

A rerun skips every stage that finished with the same settings (stage.json
records say which); an interrupted training resumes from its checkpoints.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ log lines stay hidden unless asked for (--verbose, or
# TF_CPP_MIN_LOG_LEVEL set by the user); this must happen before TensorFlow loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")

HERE = Path(__file__).resolve().parent
PARALLEL_TEXT = HERE.parent / "parallel_text"
DEFAULT_BASE_CORPUS = "../shared/data/ddtp_en_de.jsonl.gz"
DEFAULT_NEW_CORPUS = "../shared/data/po_all.jsonl.gz"


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ log lines (hidden by default)")
    parser.add_argument("--base-corpus", metavar="FILE",
                        help=f"corpus of the base model, .jsonl[.gz] or .tsv[.gz] (default {DEFAULT_BASE_CORPUS})")
    parser.add_argument("--base-run", metavar="DIR",
                        help="a trained run to fine-tune instead of training one (an imported one too: "
                             "keras-transformer import, recipes/opus_mt)")
    parser.add_argument("--new-corpus", metavar="FILE", default=DEFAULT_NEW_CORPUS,
                        help="corpus of the new domain (default %(default)s)")
    parser.add_argument("--source-key", help="JSON lines: key of the source side (default: data.source_key, en)")
    parser.add_argument("--target-key", help="JSON lines: key of the target side (default: data.target_key, de)")
    parser.add_argument("--output-dir", default="runs/fine_tuning",
                        help="directory of all stages (default %(default)s)")
    parser.add_argument("--test-size", type=int, default=1000,
                        help="held-out test pairs per corpus (default %(default)s)")
    parser.add_argument("--valid-size", type=int, default=500,
                        help="validation pairs per corpus; 0: none (default %(default)s)")
    parser.add_argument("--minutes-per-stage", type=float, metavar="M", help="training budget of each model")
    parser.add_argument("--config", action="append", default=[], help="extra YAML/JSON configuration (repeatable)")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="KEY=VALUE",
                        help="override a configuration key for both models, e.g. training.max_steps=2000")
    parser.add_argument("--finetune-set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a configuration key for the fine-tuning only, e.g. training.warmup_steps=100")
    args = parser.parse_args(argv)
    if args.base_run:
        if args.base_corpus:
            parser.error("--base-corpus trains the base model that --base-run gives; give one of them.")
        # Any run `run.trained.load_run` reads (its tokenizer: tokenizer.model, or an imported run's
        # marian_tokenizer/); main() loads it, and names what is missing.
        if not (Path(args.base_run) / "model.keras").is_file():
            parser.error(f"--base-run {args.base_run}: no model.keras there (a finished run directory is needed).")
    else:
        args.base_corpus = args.base_corpus or DEFAULT_BASE_CORPUS
        if not Path(args.base_corpus).is_file():
            parser.error(f"--base-corpus {args.base_corpus}: file not found.")
    if not Path(args.new_corpus).is_file():
        parser.error(f"--new-corpus {args.new_corpus}: file not found.")
    if args.test_size < 1 or args.valid_size < 0:
        parser.error("--test-size must be >= 1 and --valid-size >= 0.")
    if args.minutes_per_stage is not None:
        if not args.minutes_per_stage > 0:
            parser.error(f"--minutes-per-stage must be > 0, got {args.minutes_per_stage}.")
        names = {a.split("=", 1)[0].strip() for a in args.assignments + args.finetune_set}
        if "training.max_minutes" in names:
            parser.error("--minutes-per-stage and --set training.max_minutes both set the budget; give one.")
    return args


def split_corpus(corpus, config, args, label):
    """parallel_text's split of `corpus` (`keras_transformer.data.splits`) into RUN/data
    (RUN: config's output_dir), once; returns the data.* paths of its splits."""
    from keras_transformer.data.splits import prepare
    from keras_transformer.run import stages

    data_dir = Path(config["output_dir"]) / "data"
    settings = {"corpus": str(Path(corpus).resolve()), "source_key": config["data"]["source_key"],
                "target_key": config["data"]["target_key"], "max_chars": config["data"]["max_chars"],
                "test_size": args.test_size, "valid_size": args.valid_size}
    record = stages.finished(data_dir / "stage.json", settings)
    if record is not None:
        print(f"{label}: split before, skipping ({data_dir / 'stage.json'})", flush=True)
        sizes = record["sizes"]
    else:
        data = config["data"]
        report = prepare(data_dir, [corpus], source_key=data["source_key"], target_key=data["target_key"],
                         max_chars=data["max_chars"], test_size=args.test_size, valid_size=args.valid_size)
        sizes = report["sizes"]
        stages.mark_finished(data_dir / "stage.json", settings, sizes=sizes)
    files = {name: str(data_dir / f"{name}.jsonl.gz") for name in ("train", "valid", "test")}
    if not sizes["valid"]:
        files["valid"] = None
    return {**files, "train_target": None, "valid_target": None, "test_target": None}, sizes


def main(argv=None):
    args = parse_arguments(argv)
    from keras_transformer import config as config_lib
    from keras_transformer.data.corpus import CorpusError
    from keras_transformer.run import data as run_data, stages, trained as run_trained
    from keras_transformer.training.precision import choose_precision

    started = time.time()
    output = Path(args.output_dir)
    scores_dir = output / "scores"
    budget = [f"training.max_minutes={args.minutes_per_stage}"] if args.minutes_per_stage is not None else []
    try:
        config = config_lib.resolve([PARALLEL_TEXT / "config.yaml", *args.config],
                                    assignments=budget + args.assignments)
        keys = {k: v for k, v in (("source_key", args.source_key), ("target_key", args.target_key)) if v}
        config = config_lib.merge(config, {"data": keys}, origin="command line")
        config = choose_precision(config, args.assignments)
        training = config["training"]
        print(f"budget per model: {training['max_minutes'] or 'no'} minutes, "
              f"{training['max_steps'] or 'no'} step limit; models as recipes/parallel_text/config.yaml", flush=True)

        if args.base_run:
            base_dir = Path(args.base_run)
            _, _, base_config = run_trained.load_run(base_dir)
            print(f"[1/5] base model: using {base_dir} (--base-run)", flush=True)
            base_files = None
        else:
            base_config = config_lib.merge(config, {"output_dir": str(output / "base")}, origin="recipe")
            print(f"[1/5] base model on {args.base_corpus} -> {base_config['output_dir']}", flush=True)
            base_files, _ = split_corpus(args.base_corpus, base_config, args, "base data")
            base_config = config_lib.merge(base_config, {"data": base_files}, origin="recipe")
            base_dir = stages.train_stage("base", base_config,
                                          {"train_sha256": stages.file_digest(base_files["train"])})

        # The fine-tuned model has the base model's architecture (its weights are the start).
        tuned_config = config_lib.merge(config, {"output_dir": str(output / "fine_tuned"),
                                                 "model": base_config["model"]}, origin=f"{base_dir} (model)")
        print(f"[2/5] new domain: splitting {args.new_corpus}", flush=True)
        new_files, new_sizes = split_corpus(args.new_corpus, tuned_config, args, "new data")

        # Every score decodes alike, whatever the base run's own decoding settings.
        decoding = config["decoding"]
        print(f"[3/5] before: the base model on the new domain's test split ({new_sizes['test']} pairs)", flush=True)
        scores = {"new_before": stages.score_stage("base model, new domain", base_dir, new_files["test"],
                                                   scores_dir / "new_before.json", decoding)}
        if base_files:
            scores["base_before"] = stages.score_stage("base model, base domain", base_dir, base_files["test"],
                                                       scores_dir / "base_before.json", decoding)

        tuned_config = config_lib.merge(tuned_config, {"data": new_files, "training": {"init_from": str(base_dir)}},
                                        origin="recipe")
        for text in args.finetune_set:
            tuned_config = config_lib.merge(tuned_config, config_lib.parse_assignment(text),
                                            origin=f"--finetune-set {text}")
        print(f"[4/5] fine-tuning {base_dir} on the new domain's {new_sizes['train']} training pairs "
              f"(training.init_from) -> {tuned_config['output_dir']}", flush=True)
        tuned_dir = stages.train_stage("fine-tuning", tuned_config, {
            "train_sha256": stages.file_digest(new_files["train"]),
            "base_model_sha256": stages.file_digest(base_dir / run_data.MODEL_FILE)})

        print("[5/5] after: the fine-tuned model on the same test split" + (
            "s" if base_files else ""), flush=True)
        scores["new_after"] = stages.score_stage("fine-tuned model, new domain", tuned_dir, new_files["test"],
                                                 scores_dir / "new_after.json", decoding)
        if base_files:
            scores["base_after"] = stages.score_stage("fine-tuned model, base domain", tuned_dir,
                                                      base_files["test"], scores_dir / "base_after.json", decoding)
    except (CorpusError, config_lib.ConfigError, stages.StageError, run_data.RunError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    report = {
        "base": str(base_dir), "base_corpus": args.base_corpus, "new_corpus": args.new_corpus,
        "fine_tuned": str(tuned_dir), "new_sizes": new_sizes,
        "budget": {"max_minutes": training["max_minutes"], "max_steps": training["max_steps"]},
        "scores": {key: {"bleu": value["bleu"], "chrf": value["chrf"], "exact_match": value["exact_match"],
                         "sentences": value["sentences"], "corpus": value["corpus"]}
                   for key, value in scores.items()},
    }
    (output / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    rows = [("new domain", args.new_corpus, "new")]
    if base_files:
        rows.append(("base domain", args.base_corpus, "base"))
    for name, corpus, key in rows:
        before, after = scores[f"{key}_before"], scores[f"{key}_after"]
        print(f"{name} test split ({before['sentences']} sentences of {corpus}):")
        print(f"  before fine-tuning  BLEU {before['bleu']:5.1f}, chrF {before['chrf']:5.1f}")
        print(f"  after fine-tuning   BLEU {after['bleu']:5.1f}, chrF {after['chrf']:5.1f}  "
              f"{after['bleu'] - before['bleu']:+.1f} BLEU, {after['chrf'] - before['chrf']:+.1f} chrF")
    print(f"finished in {time.time() - started:.0f}s; report in {output / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
