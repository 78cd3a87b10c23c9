"""The paper's Table 3 (variations on the Transformer) at a small scale.

    python recipes/model_variations/run.py [--rows base,A1,B1,E] [--minutes-per-row 3 | --steps-per-row N]
    python recipes/model_variations/run.py --train train.jsonl.gz --valid valid.jsonl.gz --test test.jsonl.gz

Trains one model per row of `rows.py` (the base of `config.yaml`, or of
`--config` files and `--set` overrides, changed as each row says: (A) heads
with d_k = d_v = d_model / h, (B) a smaller d_k, (C) depth, d_model, d_ff,
(D) dropout and label smoothing, (E) learned positions), each for the same
budget, then measures on each run:

  * params: trainable and other weights of the model;
  * PPL (dev): exp of the token-mean cross-entropy, without label smoothing,
    over the validation split (`run.trained.validation_perplexity`);
  * BLEU (test): sacreBLEU of beam-search translations of the test split
    (`run.trained.evaluate`).

Data: by default the quickstart's synthetic English->German corpus
(`--train-pairs` training pairs; `--heldout-pairs` held-out ones, halved into
validation and test), written to OUTPUT/data; or `--train/--valid/--test`
corpora in any format `data.train` accepts (JSON lines under
`data.source_key`/`data.target_key`, TSV, ...). All rows share one tokenizer
(trained by the first), so that their perplexities count the same tokens.

OUTPUT (`--output-dir`, default runs/model_variations) holds rows/NAME (a run
directory per row), manifest.json (per row: its overrides, status and
results), table3.md (the table, printed at the end) and table3.png (BLEU and
PPL per row). Run again to go on: finished rows are skipped, an interrupted
row resumes from its checkpoints (with `--minutes-per-row`, it gets the whole
budget again), new `--rows` are added.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ log lines stay hidden unless asked for (--verbose, or
# TF_CPP_MIN_LOG_LEVEL set by the user); this must happen before TensorFlow loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if "--verbose" in sys.argv[1:] else "3")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from rows import BASE, describe, table3_rows  # noqa: E402

MANIFEST = "manifest.json"
TABLE = "table3.md"
CHART = "table3.png"
COLUMNS = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "positions")


class SweepError(RuntimeError):
    """The output directory or the options cannot serve this sweep; the message says why."""


def read_manifest(output_dir):
    path = Path(output_dir) / MANIFEST
    if not path.is_file():
        return {"rows": {}}
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SweepError(f"{path}: not JSON ({error}); move it away to start the sweep afresh.") from None
    if not isinstance(manifest.get("rows"), dict):
        raise SweepError(f"{path}: no 'rows' object; move it away to start the sweep afresh.")
    return manifest


def write_manifest(output_dir, manifest):
    """Writes the manifest through a temporary file, so that an interruption
    never leaves half of it."""
    path = Path(output_dir) / MANIFEST
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(temporary, path)


def config_digest(config):
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def prepare_data(args, output_dir, seed):
    """{train, valid, test} paths: the given corpora, or the synthetic ones (generated once)."""
    given = {"train": args.train, "valid": args.valid, "test": args.test}
    if any(given.values()):
        missing = [f"--{name}" for name, path in given.items() if not path]
        if missing:
            raise SweepError(f"give --train, --valid and --test together (missing {', '.join(missing)}).")
        for name, path in given.items():
            if not Path(path).is_file():
                raise SweepError(f"--{name} {path}: no such file.")
        return given
    from keras_transformer.datasets.synthetic_en_de import make_splits, write_jsonl

    data_dir = Path(output_dir) / "data"
    paths = {name: str(data_dir / f"{name}.jsonl.gz") for name in ("train", "valid", "test")}
    if not all(Path(path).is_file() for path in paths.values()):
        if args.heldout_pairs < 2 or args.train_pairs < 1:
            raise SweepError("--heldout-pairs must be >= 2 and --train-pairs >= 1.")
        train, heldout = make_splits(args.train_pairs, args.heldout_pairs, seed=seed)
        half = len(heldout) // 2
        data_dir.mkdir(parents=True, exist_ok=True)
        for name, pairs in (("train", train), ("valid", heldout[:half]), ("test", heldout[half:])):
            write_jsonl(paths[name], pairs)
        print(f"corpus: {len(train)} training, {half} validation and {len(heldout) - half} test pairs "
              f"(synthetic English->German) -> {data_dir}", flush=True)
    return paths


def row_config(config_lib, args, name, overrides, output_dir, data):
    budget = ([f"training.max_steps={args.steps_per_row}", "training.max_minutes=null"] if args.steps_per_row
              else [f"training.max_minutes={args.minutes_per_row}"])
    config = config_lib.resolve([HERE / "config.yaml", *args.config],
                                assignments=budget + list(args.assignments) + list(overrides))
    return config_lib.merge(config, {
        "output_dir": str(Path(output_dir) / "rows" / name),
        "data": {"train": data["train"], "valid": data["valid"], "test": data["test"],
                 "train_target": None, "valid_target": None, "test_target": None},
    }, origin="recipes/model_variations")


def run_row(config):
    """Trains (or resumes) one row and measures it; returns its results.

    A row whose training finished (its model.keras is written only then) is
    measured without training again: resuming a run that reached
    training.max_steps would still train one more step.
    """
    import keras

    from keras_transformer.run import data as run_data, train as run_train, trained as run_trained
    from keras_transformer.training import list_checkpoints

    started = time.time()
    run_dir = Path(config["output_dir"])
    if (run_dir / run_data.MODEL_FILE).is_file():
        print(f"{run_dir / run_data.MODEL_FILE}: training finished before; measuring it", flush=True)
    else:
        run_dir = Path(run_train.train(config))
    trained = time.time() - started
    checkpoints = list_checkpoints(str(run_dir / run_train.CHECKPOINT_DIR))
    params = keras.saving.load_model(str(run_dir / run_data.MODEL_FILE), compile=False).count_params()
    dev = run_trained.validation_perplexity(run_dir)
    test, _ = run_trained.evaluate(run_dir, progress=False)
    return {
        "params": params,
        "steps": checkpoints[-1][0] if checkpoints else None,
        "train_seconds": round(trained, 1),
        "perplexity": dev["perplexity"],
        "cross_entropy": dev["cross_entropy"],
        "dev_tokens": dev["tokens"],
        "bleu": test["bleu"],
        "chrf": test["chrf"],
        "exact_match": test["exact_match"],
        "test_sentences": test["sentences"],
        "bleu_signature": test["bleu_signature"],
    }


def _cell(value):
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def table_markdown(entries, base):
    """The paper's Table 3 layout: a row group, then the settings (empty where
    a row keeps `base`'s value, the base row's columns), params, PPL (dev)
    and BLEU (test)."""
    header = ["", "row", *COLUMNS, "steps", "params ×10⁶", "PPL (dev)", "BLEU (test)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    group = None
    for entry in entries:
        columns, results = entry["columns"], entry.get("results") or {}
        label = "" if entry["group"] == group else ("base" if entry["group"] == "base" else f"({entry['group']})")
        group = entry["group"]
        cells = [label, entry["name"]]
        for key in COLUMNS:
            same = entry["name"] != BASE and columns[key] == base[key]
            cells.append("" if same else _cell(columns[key]))
        if entry["status"] == "done":
            cells += [_cell(results["steps"]), f"{results['params'] / 1e6:.2f}", f"{results['perplexity']:.2f}",
                      f"{results['bleu']:.1f}"]
        else:
            cells += [entry["status"]] + ["—"] * 3
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Empty cells: the base row's value. PPL: exp of the token-mean cross-entropy without label "
                 "smoothing on the validation split (subword tokens of the shared tokenizer, so not comparable "
                 "with the paper's per-wordpiece figures); BLEU: sacreBLEU on the test split.")
    return "\n".join(lines) + "\n"


def plot_rows(entries, path):
    """BLEU (test) and PPL (dev) per finished row, side by side (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [e for e in entries if e["status"] == "done"]
    names = [e["name"] for e in done]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 0.35 * max(len(done), 3) + 1.5), sharey=True)
    positions = list(range(len(done)))
    colors = ["tab:gray" if e["name"] == BASE else "tab:blue" for e in done]
    left.barh(positions, [e["results"]["bleu"] for e in done], color=colors)
    left.set_xlim(0, max([1.0] + [e["results"]["bleu"] for e in done]) * 1.05)
    left.set_xlabel("BLEU (test)")
    right.barh(positions, [e["results"]["perplexity"] for e in done], color=colors)
    right.set_xlabel("PPL (dev)")
    left.set_yticks(positions, names)
    left.invert_yaxis()
    figure.suptitle("Table 3 variations (small scale)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ log lines (hidden by default)")
    parser.add_argument("--rows", help="comma-separated row names (default: all; see --list)")
    parser.add_argument("--list", action="store_true", help="print the rows and their overrides, then stop")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--minutes-per-row", type=float, default=3.0,
                        help="training minutes per row (default %(default)s)")
    budget.add_argument("--steps-per-row", type=int, help="training steps per row instead of minutes")
    parser.add_argument("--train", help="training corpus (with --valid and --test)")
    parser.add_argument("--valid", help="validation corpus (PPL)")
    parser.add_argument("--test", help="test corpus (BLEU)")
    parser.add_argument("--train-pairs", type=int, default=20000, help="synthetic training pairs (default %(default)s)")
    parser.add_argument("--heldout-pairs", type=int, default=1000,
                        help="synthetic held-out pairs, halved into validation and test (default %(default)s)")
    parser.add_argument("--output-dir", help="sweep directory (default: output_dir of the config)")
    parser.add_argument("--config", action="append", default=[], help="extra YAML/JSON configuration of the base")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="KEY=VALUE",
                        help="override a key of the base configuration, e.g. model.d_model=64")
    args = parser.parse_args(argv)
    if args.steps_per_row is not None and args.steps_per_row < 1:
        parser.error("--steps-per-row must be >= 1.")
    if args.minutes_per_row <= 0:
        parser.error("--minutes-per-row must be > 0.")

    from keras_transformer import config as config_lib
    from keras_transformer.run import data as run_data

    try:
        base = config_lib.resolve([HERE / "config.yaml", *args.config], assignments=args.assignments)
    except (config_lib.ConfigError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rows, dropped = table3_rows(base)
    for name, reason in dropped:
        print(f"row {name} dropped: {reason}", flush=True)
    if args.list:
        for name, group, overrides in rows:
            print(f"{name:5} ({group}) {' '.join(overrides) or '(the base)'}")
        return 0
    by_name = {name: (group, overrides) for name, group, overrides in rows}
    selected = [name for name, _, _ in rows]
    if args.rows:
        selected = [name.strip() for name in args.rows.split(",") if name.strip()]
        unknown = [name for name in selected if name not in by_name]
        if unknown:
            print(f"error: --rows: unknown or dropped row(s) {', '.join(unknown)}; the rows are "
                  f"{', '.join(by_name)}.", file=sys.stderr)
            return 2

    output_dir = Path(args.output_dir or base["output_dir"])
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        manifest = read_manifest(output_dir)
        data = prepare_data(args, output_dir, base["training"]["seed"])
        configs = {name: row_config(config_lib, args, name, by_name[name][1], output_dir, data)
                   for name in selected}
    except (SweepError, config_lib.ConfigError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name in selected:
        entry = manifest["rows"].get(name)
        if entry and entry.get("config_digest") != config_digest(configs[name]):
            print(f"error: row {name} in {output_dir / MANIFEST} was run with another configuration "
                  f"(base, budget, data or overrides changed); use a new --output-dir.", file=sys.stderr)
            return 2

    shared_tokenizer = output_dir / run_data.TOKENIZER_FILE
    failed = []
    for name in selected:
        group, overrides = by_name[name]
        config = configs[name]
        entry = manifest["rows"].get(name)
        if entry and entry["status"] == "done":
            print(f"row {name}: done before (BLEU {entry['results']['bleu']:.1f}); skipped", flush=True)
            continue
        run_dir = Path(config["output_dir"])
        entry = {"name": name, "group": group, "overrides": overrides, "run_dir": str(run_dir),
                 "columns": describe(config), "config_digest": config_digest(config), "status": "running",
                 "results": None, "error": None}
        manifest["rows"][name] = entry
        write_manifest(output_dir, manifest)
        run_dir.mkdir(parents=True, exist_ok=True)
        if shared_tokenizer.is_file() and not (run_dir / run_data.TOKENIZER_FILE).is_file():
            shutil.copyfile(shared_tokenizer, run_dir / run_data.TOKENIZER_FILE)
        print(f"row {name} ({group}): {' '.join(overrides) or 'the base'} -> {run_dir}", flush=True)
        try:
            entry["results"] = run_row(config)
        except (run_data.RunError, ValueError, OSError) as error:
            entry.update(status="failed", error=str(error))
            failed.append(name)
            print(f"row {name} failed: {error}", file=sys.stderr)
        else:
            entry["status"] = "done"
            results = entry["results"]
            print(f"row {name}: {results['params']:,} parameters, {results['steps']} steps, "
                  f"PPL (dev) {results['perplexity']:.2f}, BLEU (test) {results['bleu']:.1f}", flush=True)
            if not shared_tokenizer.is_file():
                shutil.copyfile(run_dir / run_data.TOKENIZER_FILE, shared_tokenizer)
        write_manifest(output_dir, manifest)

    order = {name: index for index, (name, _, _) in enumerate(rows)}
    entries = sorted(manifest["rows"].values(), key=lambda e: order.get(e["name"], math.inf))
    table = table_markdown(entries, describe(base))
    (output_dir / TABLE).write_text(table)
    print(table)
    if any(e["status"] == "done" for e in entries):
        print(f"chart: {plot_rows(entries, output_dir / CHART)}")
    print(f"table: {output_dir / TABLE}; manifest: {output_dir / MANIFEST}")
    if failed:
        print(f"failed rows: {', '.join(failed)} (errors in the manifest); run again to retry them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
