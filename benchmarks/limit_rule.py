"""The limit rule measured: what becomes of a hypothesis that reaches its length limit without EOS.

Decodes the test split(s) of a trained run once per rule of
`keras_transformer.decoding.LIMIT_RULES` ("fallback", tensor2tensor's: a cut
hypothesis is returned only when none of its sentence ended; "force_eos",
fairseq's: only EOS is allowed at the last position, so every hypothesis
pays for its end; "finish", CTranslate2's: a cut hypothesis competes with
the finished ones unpaid), with the run's decoding settings (beam size,
alpha, source + max_extra_length; sources cut to data.max_length as
`runs.evaluate` cuts them), and with greedy search too (`--greedy`; there
"fallback" and "finish" are the same rule). For each split, search and rule
it records sacreBLEU BLEU and chrF, and how many outputs used their whole
length budget: "at limit" (generated tokens, EOS included, reach the
sentence's limit: the run-ons, and under force_eos those it ended), of which
"cut" (no EOS at all: only fallback and finish return those); and how many
outputs differ from fallback's.

Splits are `--test NAME=FILE` (a split file, e.g. the run's own
RUN/data/test.jsonl.gz) or `--split NAME=CORPUS` (a corpus split as
recipes/parallel_text and recipes/fine_tuning split it,
`keras_transformer.data.splits.prepare` with --test-size/--valid-size, into
RUN/limit_rule/NAME; its test split is used). `--limit N` keeps the first N
pairs of each.

    KERAS_BACKEND=tensorflow python benchmarks/limit_rule.py runs/parallel_text \\
        --test parallel_text=runs/parallel_text/data/test.jsonl.gz \\
        --split po_all=../shared/data/po_all.jsonl.gz --greedy

Appends one record to benchmarks/results/limit_rule.jsonl; `table_parts`
(standard library only) gives report.py's `limit-rule` table its rows.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import _records  # noqa: E402

RULES = ("fallback", "force_eos", "finish")  # keras_transformer.decoding.LIMIT_RULES, fallback first
EXAMPLES = 3  # sentences per split and search whose output some rule changed, kept in the record
CROSS_CHECK = 32  # first sentences also translated with `Translator.translate`, the path users take


def named_paths(values, option):
    """["NAME=PATH", ...] -> [(NAME, PATH)], or an error naming the option and the value."""
    pairs = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"error: {option} {value!r}: give NAME=PATH")
        pairs.append((name, path))
    return pairs


def trained_steps(run_dir):
    """The step of the run's newest checkpoint (its latest.json), or None."""
    try:
        return json.loads((Path(run_dir) / "checkpoints" / "latest.json").read_text())["step"]
    except (OSError, ValueError, KeyError):
        return None


def split_corpus(run_dir, name, corpus, config, test_size, valid_size):
    """CORPUS split as the recipes split it, into RUN/limit_rule/NAME; returns its test split's path."""
    from keras_transformer.data.splits import prepare

    data = config["data"]
    directory = Path(run_dir) / "limit_rule" / name
    prepare(directory, [corpus], source_key=data["source_key"], target_key=data["target_key"],
            max_chars=data["max_chars"], test_size=test_size, valid_size=valid_size)
    return str(directory / "test.jsonl.gz")


def read_pairs(path, config, limit):
    from keras_transformer.data.corpus import is_jsonl, open_corpus

    data = config["data"]
    options = {"max_chars": data["max_chars"]}
    if is_jsonl(path):
        options.update(source_key=data["source_key"], target_key=data["target_key"])
    pairs, _ = open_corpus(path, None, **options).load()
    return pairs[:limit] if limit else pairs


def as_strings(texts):
    """A tokenizer's detokenized output (tensor, array or list; bytes or str) -> list of str."""
    import numpy as np

    if hasattr(texts, "numpy"):
        texts = texts.numpy()
    return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in np.asarray(texts, dtype=object).ravel()]


def decode(translator, texts):
    """Each text's best output as (text, generated tokens with EOS if any, its length limit, ended with EOS).

    The search's own ids, through `Translator.decode_ids` (what `translate` calls): a text without
    tokens translates to "" undecoded, as `translate` does. A sentence's limit is its source's ids
    (EOS included, after the cut to max_source_length) + max_extra_length, as the search sets it."""
    token_lists = translator.token_ids(texts)
    todo = [i for i, tokens in enumerate(token_lists) if tokens]
    outputs = [("", 0, None, True)] * len(texts)
    if not todo:
        return outputs
    sources = translator.source_ids([texts[i] for i in todo])
    decoded = translator.decode_ids(sources)
    ids = [row[0][0] if row else [] for row in decoded]
    texts_out = as_strings(translator.tokenizer.detokenize(ids))
    for index, source, row, tokens, text in zip(todo, sources, decoded, ids, texts_out):
        limit = len(source) + translator.max_extra_length
        if translator.max_length is not None:
            limit = min(limit, translator.max_length)
        # decode_ids drops the EOS of a hypothesis that ended; the search stops a hypothesis only
        # at EOS or at its limit, so one shorter than its limit ended with EOS, and one at it did not.
        ended = bool(row) and len(tokens) < max(limit, 1)
        outputs[index] = (text, len(tokens) + int(ended), max(limit, 1), ended)
    return outputs


def measure(translator, pairs):
    """The figures of one decode of `pairs` with `translator`, and its outputs."""
    from keras_transformer.evaluation import corpus_scores

    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    start = time.time()
    outputs = decode(translator, sources)
    seconds = time.time() - start
    hypotheses = [text for text, _, _, _ in outputs]
    # The same outputs as `translate` gives (other batches: padding must change no output).
    translated = translator.translate(sources[:CROSS_CHECK])
    agreeing = sum(a == b for a, b in zip(translated, hypotheses))
    scores = corpus_scores(hypotheses, references, tokenized_bleu=False)
    import sacrebleu

    bleu = sacrebleu.BLEU().corpus_score(hypotheses, [references])
    figures = {
        "sentences": len(pairs), "bleu": round(scores["bleu"], 3), "chrf": round(scores["chrf"], 3),
        "bleu_signature": scores["bleu_signature"], "chrf_signature": scores["chrf_signature"],
        "length_ratio": round(bleu.sys_len / bleu.ref_len, 4),
        "at_limit": sum(1 for _, length, limit, _ in outputs if limit is not None and length >= limit),
        "cut": sum(1 for _, _, limit, ended in outputs if limit is not None and not ended),
        "output_tokens_mean": round(sum(length for _, length, _, _ in outputs) / max(len(outputs), 1), 2),
        "seconds": round(seconds, 1), "same_as_translate": f"{agreeing}/{len(translated)}",
    }
    return figures, hypotheses


def run_split(model, tokenizer, config, name, path, pairs, searches, jit_compile):
    from keras_transformer.runs import make_translator

    decoding = config["decoding"]
    results = []
    for search in searches:
        settings = dict(decoding, beam_size=1) if search == "greedy" else decoding
        outputs = {}
        for rule in RULES:
            translator = make_translator(model, tokenizer, settings, config["data"]["max_length"],
                                         limit_rule=rule, search=search, jit_compile=jit_compile)
            figures, outputs[rule] = measure(translator, pairs)
            figures["changed_vs_fallback"] = sum(a != b for a, b in zip(outputs[rule], outputs["fallback"]))
            results.append({"split": name, "corpus": path, "search": search,
                            "beam_size": settings["beam_size"], "rule": rule, **figures})
            print(f"{name}, {search}, {rule}: BLEU {figures['bleu']:.2f}, chrF {figures['chrf']:.2f}, "
                  f"at limit {figures['at_limit']}, cut {figures['cut']}, changed {figures['changed_vs_fallback']}, "
                  f"{figures['seconds']:.0f}s", flush=True)
        changed = [i for i in range(len(pairs)) if len({outputs[rule][i] for rule in RULES}) > 1]
        results[-1]["examples"] = [
            {"source": pairs[i][0][:300], "reference": pairs[i][1][:300],
             **{rule: outputs[rule][i][:300] for rule in RULES}} for i in changed[:EXAMPLES]]
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a trained run directory (model.keras, tokenizer.model, config.json)")
    parser.add_argument("--test", action="append", default=[], metavar="NAME=FILE", help="a test split file")
    parser.add_argument("--split", action="append", default=[], metavar="NAME=CORPUS",
                        help="a corpus, split as the recipes split it; its test split is used")
    parser.add_argument("--test-size", type=int, default=1000, help="--split: test pairs (the recipes' default)")
    parser.add_argument("--valid-size", type=int, default=500, help="--split: validation pairs (the recipes' default)")
    parser.add_argument("--limit", type=int, default=None, help="keep the first N pairs of each split")
    parser.add_argument("--greedy", action="store_true", help="also decode with greedy search")
    parser.add_argument("--jit-compile", action="store_true", help="compile the search with XLA (TensorFlow)")
    parser.add_argument("--output", default=_records.default_path("limit_rule"))
    args = parser.parse_args(argv)
    tests, splits = named_paths(args.test, "--test"), named_paths(args.split, "--split")
    if not tests and not splits:
        parser.error("give at least one --test NAME=FILE or --split NAME=CORPUS")
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be >= 1, got {args.limit}")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ log lines, before it loads
    record = _records.start("limit_rule", argv, packages=("tensorflow", "keras", "sacrebleu"))
    from keras_transformer import runs

    from keras_transformer.data.corpus import CorpusError

    try:  # a missing run, split or corpus: its own message, not a traceback
        model, tokenizer, config = runs.load_run(args.run_dir)
        tests += [(name, split_corpus(args.run_dir, name, corpus, config, args.test_size, args.valid_size))
                  for name, corpus in splits]
        sets = [(name, path, read_pairs(path, config, args.limit)) for name, path in tests]
    except (runs.RunError, CorpusError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    searches = ["beam", "greedy"] if args.greedy else ["beam"]
    results = []
    for name, path, pairs in sets:
        results += run_split(model, tokenizer, config, name, path, pairs, searches, args.jit_compile)
    evaluation = Path(args.run_dir) / "eval.json"  # the recipe's own score (default rule), to compare
    recipe_score = None
    if evaluation.is_file():
        recipe_score = {key: json.loads(evaluation.read_text()).get(key)
                        for key in ("corpus", "sentences", "bleu", "chrf", "decoding")}
    record.update(run={"dir": str(Path(args.run_dir).resolve()), "steps": trained_steps(args.run_dir),
                       "recipe_eval": recipe_score,
                       "train_corpus": config["data"].get("train"), "model": config["model"],
                       "training": config["training"], "decoding": config["decoding"],
                       "max_source_length": config["data"]["max_length"]},
                  limit=args.limit, searches=searches, jit_compile=args.jit_compile, results=results)
    _records.save(args.output, _records.finish(record))
    return 0


# --------------------------------------------------------------------------- report.py's table


def table_parts(record):
    """(what, header, rows, align) of report.py's `limit-rule` table: per split, search and rule, BLEU,
    chrF, the outputs at their length limit (of those, cut without EOS), those that differ from
    fallback's, and BLEU's output/reference length ratio."""
    rows = []
    for result in record["results"]:
        count = result["sentences"]
        search = "greedy" if result["search"] == "greedy" else f"beam {result['beam_size']}"
        rows.append([result["split"], search, result["rule"], f"{result['bleu']:.2f}", f"{result['chrf']:.2f}",
                     f"{result['at_limit']} ({100 * result['at_limit'] / count:.1f}%)",
                     f"{result['cut']} ({100 * result['cut'] / count:.1f}%)",
                     str(result["changed_vs_fallback"]), f"{result['length_ratio']:.2f}"])
    run = record["run"]
    sizes = " or ".join(str(size) for size in sorted({result["sentences"] for result in record["results"]}))
    limit = f"the first {record['limit']} pairs of each" if record.get("limit") else "whole test splits"
    what = (f"the model of {run['dir']} after {run['steps']} steps; {sizes} sentences a split, {limit}; "
            f"alpha {run['decoding']['alpha']}; outputs up to source + {run['decoding']['max_extra_length']} tokens")
    header = ["split", "search", "rule", "BLEU", "chrF", "at limit", "cut (no EOS)", "changed vs fallback",
              "length ratio"]
    return what, header, rows, ["---"] * 3 + ["---:"] * 6


if __name__ == "__main__":
    sys.exit(main())
