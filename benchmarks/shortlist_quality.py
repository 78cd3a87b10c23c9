"""What a vocabulary shortlist costs in BLEU, on trained runs.

For each run directory given (default: /work/runs/quickstart and
/work/runs/parallel_text where they hold a model), the shortlist
(`keras_transformer.decoding.shortlist`) is built from the run's data.train
corpus at each `--settings` (per_source/frequent), and the run's test split
is translated with the run's decoding settings without it and with each:
detokenized sacreBLEU (its signature kept), the share of sentences whose
output changes, and the candidates per batch (mean share of the
vocabulary). A JSON record is appended to
`benchmarks/results/shortlist_quality.jsonl`.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/shortlist_quality.py [RUN ...] [--settings 50/100,10/50]
"""

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from benchmarks import _records  # noqa: E402

DEFAULT_RUNS = ("/work/runs/quickstart", "/work/runs/parallel_text")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", default=[r for r in DEFAULT_RUNS if os.path.isfile(r + "/model.keras")])
    parser.add_argument("--settings", default="50/100,10/50",
                        help="comma-separated per_source/frequent pairs (default %(default)s)")
    parser.add_argument("--limit", type=int, default=None, help="the first N test pairs only")
    parser.add_argument("--record", default=_records.default_path("shortlist_quality"))
    return parser.parse_args(argv)


def measure(run_dir, settings, limit):
    import sacrebleu

    from keras_transformer.decoding.shortlist import Shortlist
    from keras_transformer.run_shortlist import training_id_pairs
    from keras_transformer.run_translation import make_translator
    from keras_transformer.runs import _read_pairs, load_run

    model, tokenizer, config = load_run(run_dir)
    test = _read_pairs(config, "test")[:limit]
    sources, references = [s for s, _ in test], [t for _, t in test]
    train = _read_pairs(config, "train")
    result = {"run": run_dir, "sentences": len(test), "decoding": config["decoding"],
              "vocabulary": model.vocabulary_size, "train_pairs": len(train), "rows": []}

    def translate(shortlist):
        translator = make_translator(model, tokenizer, config["decoding"], config["data"]["max_length"],
                                     shortlist=shortlist)
        start = time.perf_counter()
        outputs = translator.translate(sources)
        return outputs, time.perf_counter() - start

    metric = sacrebleu.BLEU()
    plain, plain_seconds = translate(None)
    result["rows"].append({"shortlist": None, "bleu": metric.corpus_score(plain, [references]).score,
                           "seconds": plain_seconds})
    result["bleu_signature"] = str(metric.get_signature())
    ids = list(training_id_pairs(tokenizer, train))
    source_size = getattr(model, "source_vocabulary_size", None) or model.vocabulary_size
    batch = config["decoding"]["batch_size"]
    source_ids = [row for row in tokenizer.tokenize(sources).to_list()]
    for per_source, frequent in settings:
        shortlist = Shortlist.build(ids, source_size, model.vocabulary_size, per_source=per_source,
                                    frequent=frequent)
        # The candidates of each batch as Translator forms them (sources sorted by length).
        order = sorted(range(len(source_ids)), key=lambda i: len(source_ids[i]) + 1)
        counts = [shortlist.candidates(np.concatenate([source_ids[i] for i in order[s : s + batch]] + [[3]]))[1]
                  for s in range(0, len(order), batch)]
        outputs, seconds = translate(shortlist)
        bleu = metric.corpus_score(outputs, [references])
        changed = sum(a != b for a, b in zip(plain, outputs)) / len(plain)
        result["rows"].append({"shortlist": {"per_source": per_source, "frequent": frequent}, "bleu": bleu.score,
                               "changed_share": changed, "seconds": seconds,
                               "candidates_mean": float(np.mean(counts)), "candidates_max": int(max(counts)),
                               "vocabulary_share_mean": float(np.mean(counts)) / model.vocabulary_size})
    return result


def table_parts(record):
    """(what, header, rows) of a record's table (benchmarks/report.py's "shortlist-quality")."""
    header = ["run", "shortlist (per source, frequent)", "candidates per batch (mean, share)", "BLEU",
              "outputs changed"]
    rows = []
    for result in record["results"]:
        name = os.path.basename(result["run"].rstrip("/"))
        for row in result["rows"]:
            if row["shortlist"] is None:
                rows.append([name, "none", f"{result['vocabulary']} (100%)", f"{row['bleu']:.2f}", "-"])
            else:
                s = row["shortlist"]
                rows.append([name, f"{s['per_source']}, {s['frequent']}",
                             f"{row['candidates_mean']:.0f} ({100 * row['vocabulary_share_mean']:.0f}%)",
                             f"{row['bleu']:.2f}", f"{100 * row['changed_share']:.1f}%"])
    first = record["results"][0] if record["results"] else {}
    what = (f"each run's test split, its decoding settings (beam {first.get('decoding', {}).get('beam_size')}); "
            f"sacreBLEU {first.get('bleu_signature', '-')}")
    return what, header, rows


def main(argv=None):
    args = parse_args(argv)
    settings = [tuple(int(v) for v in pair.split("/")) for pair in args.settings.split(",")]
    record = _records.start("shortlist_quality", argv, packages=("tensorflow", "keras", "sacrebleu"))
    record["results"] = [measure(run, settings, args.limit) for run in args.runs]
    _records.finish(record)
    _records.print_table(record, table_parts)
    _records.save(args.record, record)


if __name__ == "__main__":
    main()
