"""English constituency parsing as translation (paper, section 6.3): sentences to
linearised trees (Vinyals et al. 2015), decoded back into trees and scored with
labelled bracket F1 (EVALB's COLLINS.prm conventions; keras_transformer/parsing/).

    # The package's own trees, no download, a few minutes on a CPU:
    python recipes/constituency_parsing/run.py

    # The paper's setup on the Wall Street Journal trees you bring (sections
    # 02-21 train, 22 validation, 23 test; the directory holding 00/ ... 24/):
    python recipes/constituency_parsing/run.py --config recipes/constituency_parsing/wsj.yaml \
        --wsj treebank_3/parsed/mrg/wsj

    # Any .mrg files or directories of them:
    python recipes/constituency_parsing/run.py --config my.yaml \
        --train-mrg a/ b.mrg --valid-mrg c.mrg --test-mrg d/

The data is written once to the configuration's data.train / valid / test
(JSON lines: the sentence, its linear form, the tree). Training resumes when
run again. Each test output becomes a tree over the input words: `ok`,
`repaired` (unbalanced brackets closed or dropped, missing words attached) or
`rejected` (no tree in it: scored as a parse with no brackets); the counts,
precision, recall and F1 go to OUTPUT_DIR/parse_eval.json.
"""

import argparse
import gzip
import json
import os
import sys
from collections import Counter
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ log lines stay hidden unless asked for (--verbose, or
# TF_CPP_MIN_LOG_LEVEL set by the user); this must happen before TensorFlow loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")

HERE = Path(__file__).resolve().parent
WSJ_SECTIONS = {"train": [f"{s:02d}" for s in range(2, 22)], "valid": ["22"], "test": ["23"]}


def mrg_files(paths):
    """The .mrg files named, or found (sorted) under the directories named."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.rglob("*.mrg"))
            if not found:
                raise SystemExit(f"{path}: no .mrg files in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise SystemExit(f"{path}: no such file or directory")
    return files


def read_trees(paths):
    from keras_transformer.parsing import ParseError, read_mrg

    trees = []
    for path in mrg_files(paths):
        try:
            trees += read_mrg(path)
        except ParseError as error:
            raise SystemExit(str(error)) from None
    return trees


def wsj_splits(directory):
    directory = Path(directory)
    missing = [s for sections in WSJ_SECTIONS.values() for s in sections if not (directory / s).is_dir()]
    if missing:
        raise SystemExit(f"{directory}: no WSJ section directories {missing} (expected 00/ ... 24/ "
                         "with wsj_*.mrg files)")
    return {split: read_trees([directory / s for s in sections]) for split, sections in WSJ_SECTIONS.items()}


def prepare(config, args):
    """Writes the three splits (if not there yet); returns their sizes."""
    from keras_transformer.datasets import english_trees

    data = config["data"]
    paths = {split: Path(data[split]) for split in ("train", "valid", "test")}
    if all(path.is_file() for path in paths.values()):
        return None
    if args.wsj:
        splits = wsj_splits(args.wsj)
    elif args.train_mrg or args.valid_mrg or args.test_mrg:
        if not (args.train_mrg and args.valid_mrg and args.test_mrg):
            raise SystemExit("give --train-mrg, --valid-mrg and --test-mrg together")
        splits = {"train": read_trees(args.train_mrg), "valid": read_trees(args.valid_mrg),
                  "test": read_trees(args.test_mrg)}
    else:
        train, held_out = english_trees.make_splits(args.train_trees, 2 * args.test_trees,
                                                    seed=config["training"]["seed"])
        splits = {"train": train, "valid": held_out[args.test_trees:], "test": held_out[:args.test_trees]}
    sizes = {}
    for split, trees in splits.items():
        if not trees:
            raise SystemExit(f"the {split} split has no trees")
        sizes[split] = english_trees.write_jsonl(paths[split], trees, data["source_key"], data["target_key"])
    print("data: " + ", ".join(f"{n} {split} trees" for split, n in sizes.items()) + f" -> {paths['train'].parent}")
    return sizes


def read_records(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def evaluate_parses(output_dir, limit=None, decoding=None):
    """Parses the test split, repairs or rejects each output, scores; writes parse_eval.json.
    `decoding` (beam_size, alpha, ...) overrides the run's decoding settings."""
    from keras_transformer import config as config_lib
    from keras_transformer import parsing
    from keras_transformer.run import trained as run_trained, translate as run_translate

    model, tokenizer, config = run_trained.load_run(output_dir)
    if decoding:
        config = config_lib.merge(config, {"decoding": decoding}, origin="decoding settings")
    data = config["data"]
    records = read_records(data["test"])[:limit]
    sources = [record[data["source_key"]] for record in records]
    gold = []
    for number, record in enumerate(records, 1):
        if "ptb" not in record:
            raise SystemExit(f"{data['test']}:{number}: no 'ptb' tree to score against")
        (tree,) = parsing.parse_brackets(record["ptb"], source=f"{data['test']}:{number}")
        gold.append(tree)
    outputs = run_translate.translate_texts(model, tokenizer, sources, config["decoding"],
                                   max_source_length=data["max_length"])
    decoded = [parsing.delinearize(output, tree.words()) for output, tree in zip(outputs, gold)]
    statuses = Counter(result.status for result in decoded)
    score = parsing.bracket_scores(gold, [result.tree for result in decoded])
    result = {
        "corpus": data["test"], "sentences": len(records),
        "precision": 100 * score.precision, "recall": 100 * score.recall, "f1": 100 * score.f1,
        "brackets": {"matched": score.matched, "gold": score.gold, "test": score.test},
        "outputs": {status: statuses.get(status, 0) for status in (parsing.OK, parsing.REPAIRED, parsing.REJECTED)},
        "decoding": config["decoding"],
        "samples": [{"source": s, "output": o, "tree": str(d.tree), "status": d.status, "repairs": d.repairs}
                    for s, o, d in list(zip(sources, outputs, decoded))[:5]],
    }
    (Path(output_dir) / "parse_eval.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ log lines (hidden by default)")
    parser.add_argument("--config", default=str(HERE / "config.yaml"), help="configuration file")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="KEY=VALUE")
    parser.add_argument("--wsj", help="the WSJ .mrg directory (00/ ... 24/): sections 02-21, 22, 23")
    parser.add_argument("--train-mrg", nargs="+", help=".mrg files or directories for training")
    parser.add_argument("--valid-mrg", nargs="+", help="... for validation")
    parser.add_argument("--test-mrg", nargs="+", help="... for the test")
    parser.add_argument("--train-trees", type=int, default=20000, help="embedded data: training trees")
    parser.add_argument("--test-trees", type=int, default=300, help="embedded data: test (and validation) trees")
    parser.add_argument("--limit", type=int, help="parse only the first N test sentences")
    parser.add_argument("--prepare-only", action="store_true", help="write the data and stop")
    parser.add_argument("--skip-training", action="store_true", help="only evaluate an existing run")
    args = parser.parse_args(argv)

    from keras_transformer import config as config_lib
    from keras_transformer.run import train as run_train

    config = config_lib.resolve([args.config], assignments=args.assignments)
    prepare(config, args)
    if args.prepare_only:
        return 0
    if not args.skip_training:
        run_train.train(config)
    result = evaluate_parses(config["output_dir"], args.limit, decoding=config["decoding"])
    for sample in result["samples"][:3]:
        print(f"SRC  {sample['source']}\nTREE {sample['tree']} ({sample['status']})\n")
    outputs = result["outputs"]
    print(f"test ({result['sentences']} sentences, beam {result['decoding']['beam_size']}, alpha "
          f"{result['decoding']['alpha']}): labelled bracket P {result['precision']:.2f} R {result['recall']:.2f} "
          f"F1 {result['f1']:.2f}; outputs ok {outputs['ok']}, repaired {outputs['repaired']}, "
          f"rejected {outputs['rejected']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
