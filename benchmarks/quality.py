"""Time to quality: ours, the KerasHub-layer model and OpenNMT-tf, same size, same minutes.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `quality.py`.

    KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/quality.py --minutes 20 --seeds 0 1 2
    .venv/bin/python benchmarks/quality.py --minutes 2 --max-train-pairs 5000 --test-size 100   # smoke run
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import _harness  # noqa: E402
from benchmarks._contender_opennmt import INSTALL, OpenNMT  # noqa: E402
from benchmarks._harness import positive  # noqa: E402
from benchmarks._workloads import CORPORA, MODEL, WORKER_CONFIG  # noqa: E402
from benchmarks._report_tables import quality_table  # noqa: E402
CONTENDERS = ("ours", "keras-hub", "opennmt-tf")
# Settings for a budget of a few thousand steps at most (see benchmarks/README.md):
# the paper's 4,000-step and OpenNMT-tf's 8,000-step warm-ups never end in
# 20-30 CPU minutes. Peak rate = scale * (d_model * warmup)^-0.5.
DEFAULT_SETTINGS = {"warmup_steps": 300, "learning_rate_scale": 0.8, "tokens_per_batch": 4096,
                    "mixed_precision": "none", "norm_first": False}
# Settings only some contenders have: KerasHub's optimizer (ours, or Keras' stock Adam) and architecture
# (like for like, or the keras-io example's): docs/benchmarks.md, "quality.py".
CONTENDER_SETTINGS = {"keras-hub": {"optimizer": "densified", "architecture": "tied"}}
# What each setting's --set value may be: a positive number of a type, or one of some words. Mixed
# precision is a Keras dtype policy; OpenNMT-tf's is float16 with loss scaling for GPUs (it trains in float32).
SETTING_VALUES = {"warmup_steps": int, "learning_rate_scale": float, "tokens_per_batch": int,
                  "norm_first": {"true": True, "1": True, "false": False, "0": False},
                  "mixed_precision": ("none", "mixed_bfloat16"), "optimizer": ("densified", "stock"),
                  "architecture": ("tied", "keras-io")}
# TensorFlow's start-up INFO lines: kept in the logs, not echoed.
NOISE = re.compile(r"^([IWE]\d{4} [\d:.]+ +\d+ \w+\.cc:\d+\]|WARNING: All log messages before absl"
                   r"|To enable the following instructions)")


# --------------------------------------------------------------------------- driver


def parse_args(argv=None):
    parser = _harness.parser(__doc__, "quality", aliases=("--results",))
    parser.add_argument("--minutes", type=positive(float), default=30.0, help="training wall-clock per contender")
    parser.add_argument("--only", nargs="+", choices=CONTENDERS, help="contenders to run (default: all)")
    parser.add_argument("--test-size", type=positive(int), default=1000, help="held-out test pairs (default 1000)")
    parser.add_argument("--max-train-pairs", type=positive(int), help="keep only this many training pairs (smoke)")
    parser.add_argument("--vocabulary-size", type=int, default=8000, help="joint SentencePiece pieces")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"),
                        help="directory with ddtp_en_de.jsonl.gz and po_all.jsonl.gz (default: ../shared/data)")
    parser.add_argument("--work-dir", default=str(ROOT / "runs" / "quality"),
                        help="split, tokenizer, models and outputs (default: runs/quality)")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="CONTENDER.KEY=VALUE",
                        help="override a setting, e.g. opennmt-tf.warmup_steps=1000 "
                             f"(keys: {', '.join(DEFAULT_SETTINGS)}; CONTENDER 'all' for every one)")
    parser.add_argument("--opennmt-python", default=str(ROOT / ".venv-opennmt" / "bin" / "python"),
                        help="Python of the OpenNMT-tf 2.32 environment")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="seeds (shuffling and initialisation); each seed runs every contender, the contenders "
                             "taking turns, and the table gives the mean and range over seeds (default: 0)")
    parser.add_argument("--seed", type=int, help="one seed (the same as --seeds SEED)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--settings-json", help=argparse.SUPPRESS)
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seed is not None and args.seeds is not None:
        parser.error("give --seeds or --seed, not both.")
    args.seeds = args.seeds or [0 if args.seed is None else args.seed]
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds: {args.seeds} repeats a seed.")
    # Data preparation (split, tokenizer) and the workers use args.seed: the
    # first seed for the data, each seed in turn for training.
    args.seed = args.seeds[0] if args.seed is None else args.seed
    try:
        args.settings = resolve_settings(args.assignments)
    except ValueError as error:
        parser.error(str(error))
    return args


def resolve_settings(assignments):
    """{contender: {setting: value}}: the defaults with the --set CONTENDER.KEY=VALUE `assignments` applied."""
    settings = {name: {**DEFAULT_SETTINGS, **CONTENDER_SETTINGS.get(name, {})} for name in CONTENDERS}
    for text in assignments:
        dotted, equals, value = (part.strip() for part in text.partition("="))
        name, dot, key = dotted.rpartition(".")
        if not equals or not dot or name not in CONTENDERS + ("all",):
            raise ValueError(f"--set {text!r}: expected CONTENDER.KEY=VALUE ({', '.join(CONTENDERS)} or all).")
        if key not in SETTING_VALUES:
            raise ValueError(f"--set {text!r}: unknown key {key!r} (expected one of {list(SETTING_VALUES)}).")
        targets = CONTENDERS if name == "all" else (name,)
        if any(key not in settings[target] for target in targets):
            owners = [owner for owner in CONTENDERS if key in settings[owner]]
            raise ValueError(f"--set {text!r}: only {' and '.join(owners)} has the setting {key!r}.")
        parsed = setting_value(SETTING_VALUES[key], value)
        if parsed is None:
            values = SETTING_VALUES[key]
            expected = f"a positive {values.__name__}" if isinstance(values, type) else " or ".join(values)
            raise ValueError(f"--set {text!r}: {key} must be {expected}.")
        if key == "mixed_precision" and parsed != "none" and "opennmt-tf" in targets:
            raise ValueError(f"--set {text!r}: OpenNMT-tf has no bfloat16 mode on CPU; "
                             f"set mixed_precision for ours or keras-hub.")
        for target in targets:
            settings[target][key] = parsed
    return settings


def setting_value(values, text):
    """The value `text` gives a setting whose SETTING_VALUES are `values`; None when it gives none."""
    if isinstance(values, dict):
        return values.get(text.lower())
    if not isinstance(values, type):
        return text if text in values else None
    try:
        number = values(text)
    except ValueError:
        return None
    return number if number > 0 else None


def run_logged(command, log_path, tag, env=None):
    """Runs `command`, echoing its output prefixed by `tag` and keeping it in `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=env, cwd=ROOT, bufsize=1)
        for line in process.stdout:
            log.write(line)
            log.flush()
            if not NOISE.match(line):
                print(f"[{tag}] {line}", end="", flush=True)
        return process.wait()


def worker_env(backend=True):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    if backend:
        env["KERAS_BACKEND"] = "tensorflow"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    else:
        env.pop("KERAS_BACKEND", None)
        env["PYTHONPATH"] = ""
    return env


def our_worker(args, name, extra=(), seed=None):
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name,
               "--work-dir", args.work_dir, "--data-dir", args.data_dir, "--minutes", str(args.minutes),
               "--test-size", str(args.test_size), "--vocabulary-size", str(args.vocabulary_size),
               "--seed", str(seed if seed is not None else args.seed), "--settings-json", json.dumps(args.settings),
               *extra]
    if args.max_train_pairs:
        command += ["--max-train-pairs", str(args.max_train_pairs)]
    return command


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker_main(args)
    data_dir = Path(args.data_dir)
    missing = [name for name in CORPORA if not (data_dir / name).is_file()]
    if missing:
        print(f"error: --data-dir {data_dir}: missing {', '.join(missing)} (the shared English-German data; "
              f"pass --data-dir DIR holding {' and '.join(CORPORA)}).", file=sys.stderr)
        return 2
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    names = [n for n in CONTENDERS if n in (args.only or CONTENDERS)]
    command = _harness.command_line()
    print(f"# {command}", flush=True)

    if run_logged(our_worker(args, "prepare"), work / "prepare.log", "prepare", worker_env()):
        print(f"error: data preparation failed; see {work / 'prepare.log'}", file=sys.stderr)
        return 1
    split = json.loads((work / "data" / "split.json").read_text())

    records, failed = [], []
    run = _harness.timestamp()  # names this invocation's records (report.py's table:quality run=...)
    code_commit = _harness.commit()
    # Seeds in turn, every contender once per seed, in an order rotated from
    # seed to seed: the machine's drift falls on every contender alike.
    turns = [(seed, names[i % len(names):] + names[:i % len(names)]) for i, seed in enumerate(args.seeds)]
    for seed, name in ((seed, name) for seed, order in turns for name in order):
        out = work / name
        if out.exists():
            shutil.rmtree(out)  # a fresh run: ours would otherwise resume its checkpoints
        out.mkdir(parents=True)
        load_before = _harness.load_average()
        started = time.time()
        if name == "opennmt-tf":
            opennmt = OpenNMT(args.opennmt_python)
            if not opennmt.available():
                print(f"[{name}] skipped: {args.opennmt_python} not found ({INSTALL})", flush=True)
                continue
            worker_command = opennmt.quality_command(work / "data" / "opennmt", out, args.minutes, seed,
                                                     args.settings[name], WORKER_CONFIG)
            status = run_logged(worker_command, out / "log.txt", name, worker_env(backend=False))
        else:
            status = run_logged(our_worker(args, name, seed=seed), out / "log.txt", name, worker_env())
        trained = json.loads((out / "train.json").read_text()) if (out / "train.json").is_file() else None
        if status or trained is None:
            print(f"error: contender {name} failed (exit status {status}); see {out / 'log.txt'}", file=sys.stderr)
            failed.append(name)
            continue
        if run_logged(our_worker(args, "score", ["--contender", name]), out / "score.log", f"{name} score",
                      worker_env()):
            print(f"error: scoring {name} failed; see {out / 'score.log'}", file=sys.stderr)
            failed.append(name)
            continue
        scores = json.loads((out / "scores.json").read_text())
        settings = args.settings[name]
        peak_rate = settings["learning_rate_scale"] * (MODEL["d_model"] * settings["warmup_steps"]) ** -0.5
        record = {
            "benchmark": "quality",
            "contender": name,
            "seed": seed,
            "run": run,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command,
            "commit": code_commit,
            "machine": _harness.machine(),
            "load_average": {"before": load_before, "after": _harness.load_average()},
            "budget_minutes": args.minutes,
            "settings": {**settings, "peak_learning_rate": peak_rate, **trained.get("settings", {})},
            "model": MODEL,
            "data": {"train_pairs": split["train_pairs"], "test_pairs": split["test_pairs"],
                     "vocabulary_size": split["vocabulary_size"], "split": split["method"],
                     "inputs": split["inputs"]},
            "train_minutes": trained["train_seconds"] / 60,
            "steps": trained["steps"],
            "target_tokens_trained": trained["target_tokens"],
            "target_tokens_per_step": trained["target_tokens"] / max(trained["steps"], 1),
            "search": trained["search"],
            "decode_seconds": trained["decode_seconds"],
            "versions": trained.get("versions", {}),
            "wall_minutes_total": (time.time() - started) / 60,
            **{k: scores[k] for k in ("bleu", "chrf", "bleu_signature", "chrf_signature")},
            "samples": scores["samples"],
        }
        records.append(record)
        print(f"[{name}, seed {seed}] BLEU {record['bleu']:.2f}, chrF {record['chrf']:.2f} after {record['steps']} steps "
              f"in {record['train_minutes']:.1f} min", flush=True)
        _harness.save(args.record, record)
    if records:  # the table benchmarks/README.md shows, from this invocation's records
        print("\n" + quality_table(records, {}))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


# --------------------------------------------------------------------------- workers (our venv)


def worker_main(args):
    import keras_transformer  # noqa: F401  (imports TensorFlow without its start-up noise)
    from benchmarks import _quality_worker

    return _quality_worker.run(args)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        os.environ.setdefault("KERAS_BACKEND", "tensorflow")
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
