"""Back-translation: German monolingual text turned into extra training pairs.

    python recipes/back_translation/run.py ../shared/data/ddtp_en_de.jsonl.gz ../shared/data/po_all.jsonl.gz
    python recipes/back_translation/run.py corpus.jsonl.gz --monolingual news.de.txt --tagged
    python recipes/back_translation/run.py corpus.jsonl.gz --reverse-run runs/de_en --search beam

Stages, each in its own directory under --output-dir (runs/back_translation):

  data/            the parallel corpora split as recipes/parallel_text splits
                   them (by a hash of the source sentence): test, validation,
                   real training pairs and, unless --monolingual FILE gives
                   German text, a held-out part whose English is discarded
                   and whose German serves as the monolingual text.
  reverse/         a German->English model trained on the real pairs
                   (skipped with --reverse-run DIR, a trained run).
  synthetic/       the monolingual German translated into English by the
                   reverse model: sampling by default (unrestricted, as in
                   Edunov et al. 2018, "Understanding Back-Translation at
                   Scale"; --top-k, --top-p, --temperature restrict it) or
                   beam search (--search beam). One line per German sentence.
  forward/         the English->German model trained on the real plus the
                   synthetic pairs; forward_tagged/ with --tagged, where each
                   synthetic source starts with a reserved tag (<BT>; Caswell
                   et al. 2019, "Tagged Back-Translation"), one vocabulary
                   piece that the tokenizer keeps whole.
  baseline/        the same model trained on the real pairs alone, with the
                   same budget.
  scores/          BLEU and chrF of both forward models on the same test split.

The models use recipes/parallel_text/config.yaml (< --config files < --set
overrides, which apply to every model; --reverse-set only to the reverse
one). Each training stage gets --minutes-per-stage minutes (default: the
configuration's training.max_minutes) or --set training.max_steps=N.

A rerun skips every stage that finished with the same settings (a record,
stage.json, says which); an interrupted training resumes from its
checkpoints. A stage that finished with other settings, or (a training)
with other inputs from an earlier stage, stops the recipe with an error
naming it: delete its directory to redo it.
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
DEFAULT_TAG = "<BT>"


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ log lines (hidden by default)")
    parser.add_argument("corpora", nargs="+", metavar="CORPUS", help="parallel corpora: .jsonl[.gz] or .tsv[.gz]")
    parser.add_argument("--source-key",
                        help="JSON lines: key of the source (English) side (default: data.source_key, en)")
    parser.add_argument("--target-key",
                        help="JSON lines: key of the target (German) side (default: data.target_key, de)")
    parser.add_argument("--output-dir", default="runs/back_translation",
                        help="directory of all stages (default %(default)s)")
    parser.add_argument("--test-size", type=int, default=1000, help="held-out test pairs (default %(default)s)")
    parser.add_argument("--valid-size", type=int, default=500, help="validation pairs; 0: none (default %(default)s)")
    mono = parser.add_argument_group("monolingual target-side text")
    mono.add_argument("--monolingual", metavar="FILE",
                      help="German text: plain text (one sentence a line, .gz too) or JSON lines (the target key); "
                           "default: the German side of a held-out part of the corpora")
    mono.add_argument("--monolingual-size", type=int, metavar="N",
                      help="sentences held out of the corpora as monolingual text (default 20000), or the first N "
                           "sentences of --monolingual FILE (default: all)")
    reverse = parser.add_argument_group("reverse model and its translations")
    reverse.add_argument("--reverse-run", metavar="DIR",
                         help="a trained target->source run to use instead of training one")
    reverse.add_argument("--reverse-set", action="append", default=[], metavar="KEY=VALUE",
                         help="a configuration override for the reverse model only (not with --reverse-run)")
    reverse.add_argument("--search", choices=["sampling", "beam"], default="sampling",
                         help="how the reverse model translates (default %(default)s)")
    reverse.add_argument("--top-k", type=int, help="sampling: only the k likeliest tokens (default 0: all)")
    reverse.add_argument("--top-p", type=float, help="sampling: nucleus of this probability mass (default 1.0: all)")
    reverse.add_argument("--temperature", type=float, help="sampling: divide the logits by this (default 1.0)")
    reverse.add_argument("--seed", type=int, help="sampling: random seed (default 0)")
    reverse.add_argument("--beam-size", type=int, help="beam search: beam size (default: decoding.beam_size, 4)")
    forward = parser.add_argument_group("forward models")
    forward.add_argument("--tagged", action="store_true", help="start each synthetic source with a reserved tag")
    forward.add_argument("--tag", help=f"the tag (default {DEFAULT_TAG}); needs --tagged")
    parser.add_argument("--minutes-per-stage", type=float, metavar="M", help="training budget of each model")
    parser.add_argument("--config", action="append", default=[], help="extra YAML/JSON configuration (repeatable)")
    parser.add_argument("--set", action="append", default=[], dest="assignments", metavar="KEY=VALUE",
                        help="override a configuration key for every model, e.g. training.max_steps=2000")
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def _names(assignments):
    return {assignment.split("=", 1)[0].strip() for assignment in assignments}


def check_arguments(parser, args):
    """Conflicting or impossible arguments fail here, before any work, naming the argument."""
    for path in args.corpora:
        if not Path(path).is_file():
            parser.error(f"CORPUS {path}: file not found.")
    if args.monolingual and not Path(args.monolingual).is_file():
        parser.error(f"--monolingual {args.monolingual}: file not found.")
    if args.test_size < 1 or args.valid_size < 0:
        parser.error("--test-size must be >= 1 and --valid-size >= 0.")
    if args.monolingual_size is not None and args.monolingual_size < 1:
        parser.error(f"--monolingual-size must be >= 1, got {args.monolingual_size}.")
    if args.reverse_run:
        if args.reverse_set:
            parser.error("--reverse-set configures the reverse model that --reverse-run replaces; give one of them.")
        for name in ("model.keras", "tokenizer.model"):
            if not (Path(args.reverse_run) / name).is_file():
                parser.error(f"--reverse-run {args.reverse_run}: no {name} there (a finished run directory is needed).")
    sampling = {"--top-k": args.top_k, "--top-p": args.top_p, "--temperature": args.temperature, "--seed": args.seed}
    if args.search == "beam":
        given = [name for name, value in sampling.items() if value is not None]
        if given:
            parser.error(f"{', '.join(given)}: sampling options, but --search is beam.")
    elif args.beam_size is not None:
        parser.error("--beam-size: a beam-search option, but --search is sampling (add --search beam).")
    if args.top_k is not None and args.top_k < 0:
        parser.error(f"--top-k must be >= 0, got {args.top_k}.")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        parser.error(f"--top-p must be in (0, 1], got {args.top_p}.")
    if args.temperature is not None and not args.temperature > 0:
        parser.error(f"--temperature must be > 0, got {args.temperature}.")
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}.")
    if args.beam_size is not None and args.beam_size < 1:
        parser.error(f"--beam-size must be >= 1, got {args.beam_size}.")
    if args.tag is not None and not args.tagged:
        parser.error("--tag names the tag of --tagged; add --tagged.")
    if args.tag is not None and (not args.tag or args.tag != "".join(args.tag.split())):
        parser.error(f"--tag must be one word without spaces, got {args.tag!r}.")
    if args.minutes_per_stage is not None:
        if not args.minutes_per_stage > 0:
            parser.error(f"--minutes-per-stage must be > 0, got {args.minutes_per_stage}.")
        if "training.max_minutes" in _names(args.assignments + args.reverse_set):
            parser.error("--minutes-per-stage and --set training.max_minutes both set the budget; give one.")


# --------------------------------------------------------------------------- data


def read_monolingual(path, key, max_chars):
    """Non-empty, stripped sentences of a plain-text or JSON-lines (`key`) file, and the count skipped."""
    from keras_transformer.data.corpus import is_jsonl, iter_lines, read_jsonl

    if is_jsonl(path):
        texts = (source for source, _ in read_jsonl(path, source_key=key, target_key=key, strip=True,
                                                    skip_empty=False))
    else:
        texts = (text.strip() for _, text in iter_lines(path))
    kept, skipped = [], 0
    for text in texts:
        if text and len(text) <= max_chars:
            kept.append(text)
        else:
            skipped += 1
    return kept, skipped


def prepare_data(args, config, data_dir):
    """Splits the corpora as parallel_text does (and reads --monolingual) into data_dir; returns the sizes."""
    from keras_transformer.data.corpus import write_jsonl
    from keras_transformer.data.splits import hold_out_targets, read_records, split_by_hash, write_split
    from keras_transformer.run import stages

    data = config["data"]
    source_key, target_key = data["source_key"], data["target_key"]
    settings = {
        "corpora": [str(Path(p).resolve()) for p in args.corpora], "source_key": source_key,
        "target_key": target_key, "max_chars": data["max_chars"], "test_size": args.test_size,
        "valid_size": args.valid_size, "monolingual": args.monolingual and str(Path(args.monolingual).resolve()),
        "monolingual_size": args.monolingual_size,
    }
    record = stages.finished(data_dir / "stage.json", settings)
    if record is not None:
        print(f"data: split before, skipping ({data_dir / 'stage.json'})", flush=True)
        return record["sizes"]
    records, _ = read_records(args.corpora, (), source_key, target_key, data["max_chars"])
    if not records:
        raise ValueError("the corpora hold no usable sentence pairs.")
    splits = split_by_hash(records, args.test_size, args.valid_size)
    held_out = set()
    if args.monolingual:
        monolingual, skipped = read_monolingual(args.monolingual, target_key, data["max_chars"])
        # A test or validation reference among the monolingual text would leak it into training.
        held_out = {record[1] for name in ("test", "valid") for record in splits[name]}
        leaking = sum(1 for text in monolingual if text in held_out)
        monolingual = [text for text in monolingual if text not in held_out][: args.monolingual_size]
        print(f"--monolingual {args.monolingual}: {len(monolingual)} sentences kept, {skipped} empty or over "
              f"data.max_chars, {leaking} equal to a test or validation reference dropped", flush=True)
        if not monolingual:
            raise ValueError(f"--monolingual {args.monolingual}: no usable sentence.")
        real = splits["train"]
    else:
        size = 20000 if args.monolingual_size is None else args.monolingual_size
        # The next sentences in hash order after test and validation: English dropped, German kept.
        monolingual, real = hold_out_targets(splits["train"], size)
    for name, part in (("test", splits["test"]), ("training", real)):
        if not part:
            raise ValueError(f"the {name} split is empty ({len(records)} pairs in all); lower --test-size, "
                             f"--valid-size or --monolingual-size, or add data.")
    data_dir.mkdir(parents=True, exist_ok=True)
    write_split(data_dir / "train.jsonl.gz", real, source_key, target_key)
    write_split(data_dir / "test.jsonl.gz", splits["test"], source_key, target_key)
    if splits["valid"]:
        write_split(data_dir / "valid.jsonl.gz", splits["valid"], source_key, target_key)
    write_jsonl(data_dir / "monolingual.jsonl.gz", ({target_key: text} for text in monolingual))
    sizes = {"train": len(real), "valid": len(splits["valid"]), "test": len(splits["test"]),
             "monolingual": len(monolingual)}
    stages.mark_finished(data_dir / "stage.json", settings, sizes=sizes)
    origin = args.monolingual or "the German side of held-out pairs (their English discarded)"
    print(f"data: test {sizes['test']}, valid {sizes['valid']}, real training {sizes['train']} pairs; "
          f"{sizes['monolingual']} monolingual sentences from {origin} -> {data_dir}", flush=True)
    return sizes


def read_column(path, key):
    from keras_transformer.data.corpus import iter_lines

    return [json.loads(line)[key] for _, line in iter_lines(path)]


# --------------------------------------------------------------------------- synthetic pairs


def search_options(args, reverse_config):
    """The Translator options and decoding settings of the back-translation."""
    decoding = dict(reverse_config["decoding"])
    if args.search == "beam":
        if args.beam_size is not None:
            decoding["beam_size"] = args.beam_size
        return {"search": "beam"}, decoding
    options = {"search": "sampling", "temperature": 1.0 if args.temperature is None else args.temperature,
               "top_k": args.top_k or 0, "top_p": 1.0 if args.top_p is None else args.top_p,
               "seed": args.seed or 0}
    return options, decoding


def describe_search(options, decoding):
    if options["search"] == "beam":
        return f"beam search (beam {decoding['beam_size']}, alpha {decoding['alpha']})"
    restricted = []
    if options["top_k"]:
        restricted.append(f"top-k {options['top_k']}")
    if options["top_p"] < 1:
        restricted.append(f"top-p {options['top_p']}")
    if options["temperature"] != 1:
        restricted.append(f"temperature {options['temperature']}")
    return f"sampling ({', '.join(restricted) or 'unrestricted'}, seed {options['seed']})"


def back_translate(args, reverse_dir, data_dir, synthetic_dir, source_key, target_key):
    """Translates data/monolingual into synthetic/synthetic.jsonl.gz (one pair per German sentence)."""
    from keras_transformer.data.corpus import write_jsonl
    from keras_transformer.run import data as run_data, stages, trained as run_trained, translate as run_translate

    model_path = reverse_dir / run_data.MODEL_FILE
    monolingual_path = data_dir / "monolingual.jsonl.gz"
    model, tokenizer, reverse_config = run_trained.load_run(reverse_dir)
    options, decoding = search_options(args, reverse_config)
    settings = {"reverse_model": str(model_path.resolve()), "reverse_model_sha256": stages.file_digest(model_path),
                "monolingual_sha256": stages.file_digest(monolingual_path), "options": options,
                "decoding": decoding, "source_key": source_key, "target_key": target_key}
    record_path = synthetic_dir / "stage.json"
    record = stages.finished(record_path, settings)
    if record is not None:
        print(f"synthetic: translated before, skipping ({record_path})", flush=True)
        return record
    german = read_column(monolingual_path, target_key)
    print(f"synthetic: translating {len(german)} German sentences into English with "
          f"{describe_search(options, decoding)} -> {synthetic_dir}", flush=True)
    translator = run_translate.make_translator(model, tokenizer, decoding,
                                      max_source_length=reverse_config["data"]["max_length"], **options)
    start, english, chunk = time.time(), [], decoding["batch_size"] * 8
    for first in range(0, len(german), chunk):
        if options["search"] == "sampling":
            # Distinct seeds per chunk (the translator adds the batch index within a call).
            translator.seed = options["seed"] + first
        english.extend(translator.translate(german[first:first + chunk]))
        rate = len(english) / max(time.time() - start, 1e-9)
        print(f"  {len(english)}/{len(german)} sentences, {rate:.1f}/s, "
              f"{(len(german) - len(english)) / rate:.0f}s left", flush=True)
    seconds = time.time() - start
    write_jsonl(synthetic_dir / "synthetic.jsonl.gz", ({source_key: en, target_key: de}
                                                      for en, de in zip(english, german)))
    empty = sum(1 for text in english if not text.strip())
    for en, de in list(zip(english, german))[:3]:
        print(f"  DE {de}\n  EN {en}", flush=True)
    return stages.mark_finished(record_path, settings, sentences=len(german), empty_translations=empty,
                                seconds=round(seconds, 1),
                                sentences_per_second=round(len(german) / max(seconds, 1e-9), 2))


def write_forward_corpus(path, data_dir, synthetic_dir, source_key, target_key, tag):
    """Real pairs, then the synthetic ones (their source tagged with `tag` unless None;
    the pairs whose synthetic source came out empty are left out). Returns (real, synthetic) counts."""
    from keras_transformer.data.corpus import iter_lines, write_jsonl

    counts = {"real": 0, "synthetic": 0}

    def rows():
        for _, line in iter_lines(data_dir / "train.jsonl.gz"):
            counts["real"] += 1
            yield json.loads(line)
        for _, line in iter_lines(synthetic_dir / "synthetic.jsonl.gz"):
            row = json.loads(line)
            if not row[source_key].strip():
                continue
            if tag:
                row[source_key] = f"{tag} {row[source_key]}"
            counts["synthetic"] += 1
            yield row

    write_jsonl(path, rows())
    return counts["real"], counts["synthetic"]


# --------------------------------------------------------------------------- main


def main(argv=None):
    args = parse_arguments(argv)
    from keras_transformer import config as config_lib
    from keras_transformer.data.corpus import CorpusError
    from keras_transformer.run import data as run_data, stages, trained as run_trained
    from keras_transformer.training.precision import choose_precision

    started = time.time()
    output = Path(args.output_dir)
    data_dir, synthetic_dir, scores_dir = output / "data", output / "synthetic", output / "scores"
    budget = [f"training.max_minutes={args.minutes_per_stage}"] if args.minutes_per_stage is not None else []
    try:
        config = config_lib.resolve([PARALLEL_TEXT / "config.yaml", *args.config],
                                    assignments=budget + args.assignments)
        keys = {k: v for k, v in (("source_key", args.source_key), ("target_key", args.target_key)) if v}
        config = config_lib.merge(config, {"data": keys}, origin="command line")
        config = choose_precision(config, args.assignments)
        source_key, target_key = config["data"]["source_key"], config["data"]["target_key"]
        if source_key == target_key:
            raise ValueError(f"--source-key and --target-key are both {source_key!r}.")
        training = config["training"]
        print(f"budget per model: {training['max_minutes'] or 'no'} minutes, "
              f"{training['max_steps'] or 'no'} step limit; models as recipes/parallel_text/config.yaml", flush=True)

        print(f"[1/6] data: splitting {', '.join(args.corpora)}", flush=True)
        sizes = prepare_data(args, config, data_dir)
        files = {name: str(data_dir / f"{name}.jsonl.gz") for name in ("train", "valid", "test")}
        if not sizes["valid"]:
            files["valid"] = None
        plain = {"train_target": None, "valid_target": None, "test_target": None}
        real_inputs = {"train_sha256": stages.file_digest(files["train"])}

        if args.reverse_run:
            reverse_dir = Path(args.reverse_run)
            print(f"[2/6] reverse model: using {reverse_dir} (--reverse-run)", flush=True)
            _, _, reverse_config = run_trained.load_run(reverse_dir)
            if reverse_config["data"]["source_key"] != target_key:
                print(f"  note: {reverse_dir} was trained from the key {reverse_config['data']['source_key']!r}, "
                      f"this corpus's target key is {target_key!r}", flush=True)
        else:
            reverse_config = config_lib.merge(config, {
                "output_dir": str(output / "reverse"),
                "data": {**files, **plain, "source_key": target_key, "target_key": source_key}}, origin="recipe")
            for text in args.reverse_set:
                reverse_config = config_lib.merge(reverse_config, config_lib.parse_assignment(text),
                                                  origin=f"--reverse-set {text}")
            print(f"[2/6] reverse model {target_key}->{source_key}: {sizes['train']} real pairs -> "
                  f"{reverse_config['output_dir']}", flush=True)
            reverse_dir = stages.train_stage("reverse", reverse_config, real_inputs)

        print(f"[3/6] synthetic {source_key}: back-translating {sizes['monolingual']} {target_key} sentences",
              flush=True)
        synthetic = back_translate(args, reverse_dir, data_dir, synthetic_dir, source_key, target_key)

        tag = (args.tag or DEFAULT_TAG) if args.tagged else None
        forward_dir = output / ("forward_tagged" if tag else "forward")
        forward_dir.mkdir(parents=True, exist_ok=True)
        forward_train = forward_dir / "train.jsonl.gz"
        real, synthetic_pairs = write_forward_corpus(forward_train, data_dir, synthetic_dir, source_key, target_key,
                                                     tag)
        symbols = (config["data"]["user_defined_symbols"] or "").split()
        if tag and tag not in symbols:
            symbols.append(tag)
        forward_config = config_lib.merge(config, {
            "output_dir": str(forward_dir),
            "data": {**files, **plain, "train": str(forward_train), "user_defined_symbols": " ".join(symbols) or None},
        }, origin="recipe")
        empty = synthetic["empty_translations"]
        print(f"[4/6] forward model {source_key}->{target_key}: {real} real + {synthetic_pairs} synthetic pairs"
              + (f" ({empty} empty translations left out)" if empty else "")
              + (f", synthetic sources tagged {tag}" if tag else "") + f" -> {forward_dir}", flush=True)
        stages.train_stage("forward", forward_config, {
            **real_inputs, "synthetic_sha256": stages.file_digest(synthetic_dir / "synthetic.jsonl.gz")})

        baseline_config = config_lib.merge(config, {"output_dir": str(output / "baseline"),
                                                    "data": {**files, **plain}}, origin="recipe")
        print(f"[5/6] baseline {source_key}->{target_key}: the {real} real pairs alone, same budget -> "
              f"{baseline_config['output_dir']}", flush=True)
        baseline_dir = stages.train_stage("baseline", baseline_config, real_inputs)

        print(f"[6/6] scoring both on the test split ({sizes['test']} pairs, beam {config['decoding']['beam_size']})",
              flush=True)
        name = forward_dir.name
        scores = {
            "baseline": stages.score_stage("baseline", baseline_dir, files["test"], scores_dir / "baseline.json"),
            name: stages.score_stage(name, forward_dir, files["test"], scores_dir / f"{name}.json"),
        }
    except (CorpusError, config_lib.ConfigError, stages.StageError, run_data.RunError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    report = {
        "test_sentences": sizes["test"], "real_pairs": real, "synthetic_pairs": synthetic_pairs,
        "monolingual_sentences": sizes["monolingual"], "search": synthetic["settings"]["options"], "tag": tag,
        "budget": {"max_minutes": training["max_minutes"], "max_steps": training["max_steps"]},
        "scores": {key: {"bleu": value["bleu"], "chrf": value["chrf"], "exact_match": value["exact_match"]}
                   for key, value in scores.items()},
    }
    (output / f"report_{name}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    base, back = scores["baseline"], scores[name]
    rows = [(f"baseline ({real} real pairs)", base, ""),
            (f"{name} (+ {synthetic_pairs} synthetic pairs)", back,
             f"  {back['bleu'] - base['bleu']:+.1f} BLEU, {back['chrf'] - base['chrf']:+.1f} chrF")]
    width = max(len(label) for label, _, _ in rows)
    print(f"test split ({sizes['test']} sentences, the same budget for both):")
    for label, result, difference in rows:
        print(f"  {label:<{width}}  BLEU {result['bleu']:5.1f}, chrF {result['chrf']:5.1f}{difference}")
    print(f"finished in {time.time() - started:.0f}s; report in {output / f'report_{name}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
