"""OPUS-MT: a trained Marian model imported, scored on your in-domain text, fine-tuned there, scored again, exported.

    python recipes/opus_mt/run.py hf://Helsinki-NLP/opus-mt-en-de in_domain.jsonl.gz
    python recipes/opus_mt/run.py models/opus-mt-en-de in_domain.tsv.gz --minutes-per-stage 60

SOURCE is what `keras-transformer import` takes (a MarianMT folder, an OPUS-MT
release folder, hf://OWNER/NAME); CORPUS is parallel text, .jsonl[.gz] (keys
--source-key/--target-key, default en/de) or .tsv[.gz]. Stages, each under
--output-dir (runs/opus_mt), each skipped when it finished with the same
inputs (keras_transformer.run.stages):

  imported/        SOURCE imported (keras-transformer import)
  fine_tuned/data/ CORPUS split as recipes/parallel_text splits it
  scores/          BLEU and chrF on the test split, before (imported model)
                   and after fine-tuning
  fine_tuned/      the imported model trained further on the training split
                   (training.init_from; its tokenizer kept)
  export/          the fine-tuned run for TF Serving (export/serving/translator/N)
                   and CTranslate2 (export/ctranslate2)
  report.json      the scores and where everything is

The split, the scores and the fine-tuning are recipes/fine_tuning/run.py
--base-run imported/, with recipes/opus_mt/config.yaml (a fine-tuning learning
rate) and the imported model's own decoding settings; --config, --set and
--finetune-set go to it as they are.
"""

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")

HERE = Path(__file__).resolve().parent
FINE_TUNING = HERE.parent / "fine_tuning" / "run.py"


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", metavar="SOURCE",
                        help="the model: a MarianMT folder, an OPUS-MT release folder, or hf://OWNER/NAME")
    parser.add_argument("corpus", metavar="CORPUS", help="in-domain parallel text, .jsonl[.gz] or .tsv[.gz]")
    parser.add_argument("--output-dir", default="runs/opus_mt", help="directory of all stages (default %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's C++ log lines")
    parser.add_argument("--source-key", help="JSON lines: key of the source side (default en)")
    parser.add_argument("--target-key", help="JSON lines: key of the target side (default de)")
    parser.add_argument("--test-size", type=int, default=1000, help="held-out test pairs (default %(default)s)")
    parser.add_argument("--valid-size", type=int, default=500, help="validation pairs; 0: none (default %(default)s)")
    parser.add_argument("--minutes-per-stage", type=float, metavar="M", help="the fine-tuning's training budget")
    parser.add_argument("--config", action="append", default=[], help="extra YAML/JSON configuration (repeatable)")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="KEY=VALUE",
                        help="override a configuration key, e.g. training.max_steps=2000")
    parser.add_argument("--finetune-set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a configuration key of the fine-tuning only")
    args = parser.parse_args(argv)
    if not Path(args.corpus).is_file():
        parser.error(f"CORPUS {args.corpus}: file not found.")
    if not args.source.startswith("hf://") and not Path(args.source).is_dir():
        parser.error(f"SOURCE {args.source}: no such folder (a MarianMT or OPUS-MT release folder, "
                     "or hf://OWNER/NAME).")
    return args


def import_stage(source, run_dir):
    """`keras-transformer import SOURCE run_dir`, unless run_dir/stage.json says SOURCE was imported there."""
    from keras_transformer.marian.run_import import import_marian
    from keras_transformer.run import stages

    record_path = run_dir / "stage.json"
    settings = {"source": source if source.startswith("hf://") else str(Path(source).resolve())}
    if stages.finished(record_path, settings) is not None:
        print(f"import: finished before, skipping ({record_path})", flush=True)
        return
    started = time.time()
    import_marian(source, run_dir, force=True)  # a run_dir without this record holds no finished import
    stages.mark_finished(record_path, settings, seconds=round(time.time() - started, 1))
    print(f"import: {source} -> {run_dir} in {time.time() - started:.0f}s", flush=True)


def export_stage(run_dir, export_dir):
    """The fine-tuned run for TF Serving and CTranslate2, unless export_dir/stage.json has this very model."""
    from keras_transformer.run import data as run_data, stages, trained as run_trained

    record_path = export_dir / "stage.json"
    settings = {"model_sha256": stages.file_digest(run_dir / run_data.MODEL_FILE)}
    record = stages.finished(record_path, settings)
    if record is not None:
        print(f"export: finished before, skipping ({record_path})", flush=True)
        return record["serving"], record["ctranslate2"]
    serving = run_trained.export(run_dir, export_dir / "serving")
    ctranslate2 = run_trained.export_ctranslate2(run_dir, export_dir / "ctranslate2", force=True)
    stages.mark_finished(record_path, settings, serving=str(serving), ctranslate2=str(ctranslate2))
    print(f"export: TF Serving {serving}, CTranslate2 {ctranslate2}", flush=True)
    return str(serving), str(ctranslate2)


def main(argv=None):
    args = parse_arguments(argv)
    from keras_transformer.run import data as run_data

    output = Path(args.output_dir)
    imported, tuned = output / "imported", output / "fine_tuned"
    try:
        print(f"[import] {args.source} -> {imported}", flush=True)
        import_stage(args.source, imported)
    except (run_data.RunError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    # The scores decode as the imported model does (its beams, Marian's length rule).
    decoding_path = output / "imported_decoding.json"
    decoding = json.loads((imported / run_data.CONFIG_FILE).read_text())["decoding"]
    decoding_path.write_text(json.dumps({"decoding": decoding}, indent=2) + "\n")
    spec = importlib.util.spec_from_file_location("fine_tuning_recipe", FINE_TUNING)
    fine_tuning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fine_tuning)
    words = ["--base-run", str(imported), "--new-corpus", args.corpus, "--output-dir", str(output),
             "--test-size", str(args.test_size), "--valid-size", str(args.valid_size),
             "--config", str(HERE / "config.yaml"), "--config", str(decoding_path)]
    for option, value in (("--source-key", args.source_key), ("--target-key", args.target_key),
                          ("--minutes-per-stage", args.minutes_per_stage)):
        if value is not None:
            words += [option, str(value)]
    words += [word for config in args.config for word in ("--config", config)]
    words += [word for text in args.assignments for word in ("--set", text)]
    words += [word for text in args.finetune_set for word in ("--finetune-set", text)]
    if args.verbose:
        words.append("--verbose")
    status = fine_tuning.main(words)
    if status:
        return status

    try:
        print("[export] the fine-tuned run", flush=True)
        serving, ctranslate2 = export_stage(tuned, output / "export")
    except (run_data.RunError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    report_path = output / "report.json"
    report = json.loads(report_path.read_text())
    report.update(source=args.source, imported=str(imported), export={"serving": serving, "ctranslate2": ctranslate2})
    report_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(f"report: {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
