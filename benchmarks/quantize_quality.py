"""What the int8 and bfloat16 weights cost in BLEU, on trained runs.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `quantize_quality.py`.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/quantize_quality.py [RUN ...] [--limit N] [--no-ctranslate2]
"""

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import _harness  # noqa: E402

DEFAULT_RUNS = ("/work/runs/quickstart", "/work/runs/parallel_text")
REFERENCE = "float32"
# (name, what translates, weights); each row's difference and identity are to REFERENCE's,
# and "vs engine float32" rows also to the engine's own float32.
CONTENDERS = (
    ("float32", "Translator", "float32"),
    ("int8", "Translator", "int8"),
    ("bfloat16", "Translator", "bfloat16"),
    ("CTranslate2 int8", "CTranslate2", "int8 (the int8 model's kernels)"),
    ("CTranslate2 float32", "CTranslate2", "float32"),
)
ENGINE_REFERENCE = "CTranslate2 float32"


def parse_args(argv=None):
    parser = _harness.parser(__doc__, "quantize_quality")
    parser.add_argument("runs", nargs="*", default=[r for r in DEFAULT_RUNS if os.path.isfile(r + "/model.keras")])
    parser.add_argument("--limit", type=_harness.positive(int), help="the first N test pairs only (default: all)")
    parser.add_argument("--no-ctranslate2", action="store_true", help="leave out the CTranslate2 rows")
    args = parser.parse_args(argv)
    if not args.runs:
        parser.error("no run given, and none of the default runs holds a model.keras")
    return args


def compare(outputs, reference_outputs, references, reference_bleu=None):
    """BLEU of `outputs` against `references` (sacreBLEU defaults) and its signature, its difference to `reference_bleu`
    (None: no difference), and the share of outputs identical to `reference_outputs`."""
    import sacrebleu

    if len(outputs) != len(references) or len(outputs) != len(reference_outputs):
        raise ValueError(f"{len(outputs)} outputs, {len(reference_outputs)} reference outputs, "
                         f"{len(references)} references: they must be as many")
    metric = sacrebleu.BLEU()
    bleu = metric.corpus_score(list(outputs), [list(references)]).score
    same = sum(a == b for a, b in zip(outputs, reference_outputs))
    return {"bleu": round(bleu, 3), "bleu_signature": str(metric.get_signature()),
            "bleu_vs_float32": None if reference_bleu is None else round(bleu - reference_bleu, 3),
            "identical_to_float32": round(same / max(len(outputs), 1), 4)}


def translate_in_process(model, tokenizer, config, sources):
    from keras_transformer.run.translate import make_translator

    translator = make_translator(model, tokenizer, config["decoding"], config["data"]["max_length"])
    return translator.translate(sources)


def ctranslate2_export(model, tokenizer, config, directory, quantization):
    """The run's CTranslate2 export of `model` (run.trained.export_ctranslate2's settings) and its info."""
    import json

    from keras_transformer.export.ctranslate2 import CTRANSLATE2_OPTIONS_PATH, export_ctranslate2

    decoding = config["decoding"]
    path = export_ctranslate2(model, tokenizer, directory, quantization=quantization,
                              beam_size=decoding["beam_size"], alpha=decoding["alpha"],
                              max_extra_length=decoding["max_extra_length"],
                              max_input_length=config["data"]["max_length"])
    info = json.loads(Path(path, CTRANSLATE2_OPTIONS_PATH).read_text())
    return path, {"quantization": info["quantization"], "int8_from_keras": info["int8_from_keras"]}


def measure(run_dir, limit, with_ctranslate2=True):
    from keras_transformer.export.ctranslate2 import CTranslate2Translator
    from keras_transformer.export.quantize import int8_layers, quantize_model
    from keras_transformer.run.data import read_pairs
    from keras_transformer.run.trained import load_run

    model, tokenizer, config = load_run(run_dir)
    pairs = read_pairs(config, "test")
    test = pairs[:limit] if limit else pairs
    sources, references = [s for s, _ in test], [t for _, t in test]
    int8_model = quantize_model(model, "int8")
    result = {"run": str(run_dir), "test": config["data"]["test"], "sentences": len(test), "test_pairs": len(pairs),
              "decoding": config["decoding"], "max_input_length": config["data"]["max_length"],
              "model": {key: config["model"][key] for key in ("preset", "d_model", "num_encoder_layers",
                                                              "num_decoder_layers", "norm_first")},
              "vocabulary": model.vocabulary_size, "int8_kernels": len(int8_layers(int8_model)),
              "rows": []}
    outputs = {}
    with tempfile.TemporaryDirectory(prefix="quantize_quality-") as scratch:
        for name, path, weights in CONTENDERS:
            if path == "CTranslate2" and not with_ctranslate2:
                continue
            row = {"name": name, "path": path, "weights": weights}
            start = time.perf_counter()
            if path == "Translator":
                weighted = model if name == "float32" else int8_model if name == "int8" else quantize_model(model, name)
                outputs[name] = translate_in_process(weighted, tokenizer, config, sources)
            else:
                quantization = "int8" if "int8" in name else "float32"
                directory, row["export"] = ctranslate2_export(int8_model if quantization == "int8" else model,
                                                              tokenizer, config, Path(scratch, quantization),
                                                              quantization)
                engine = CTranslate2Translator(directory, compute_type=quantization)
                outputs[name] = engine.translate(sources)
            row["seconds"] = round(time.perf_counter() - start, 1)
            reference = result["rows"][0]["bleu"] if result["rows"] else None
            row.update(compare(outputs[name], outputs.get(REFERENCE, outputs[name]), references, reference))
            result["bleu_signature"] = row.pop("bleu_signature")
            result["rows"].append(row)
            print(f"# {os.path.basename(str(run_dir).rstrip('/'))} {name}: BLEU {row['bleu']:.2f}, "
                  f"identical to float32 {row['identical_to_float32']:.1%}, {row['seconds']} s", flush=True)
    if "CTranslate2 int8" in outputs and ENGINE_REFERENCE in outputs:
        engine_bleu = next(r["bleu"] for r in result["rows"] if r["name"] == ENGINE_REFERENCE)
        row = next(r for r in result["rows"] if r["name"] == "CTranslate2 int8")
        against_engine = compare(outputs["CTranslate2 int8"], outputs[ENGINE_REFERENCE], references, engine_bleu)
        row["vs_engine_float32"] = {"bleu": against_engine["bleu_vs_float32"],
                                    "identical": against_engine["identical_to_float32"]}
    return result


def percent(share):
    return f"{100 * share:.1f}%"


def signed(value):
    return f"{value:+.2f}"


def table_parts(record):
    """(what, header, rows) of a record's table (benchmarks/report.py's "quantize-quality"): one row
    per run, one column per contender, each cell "BLEU (difference to float32; share identical)"."""
    names = []
    for result in record["results"]:
        names += [row["name"] for row in result["rows"] if row["name"] not in names]
    rows = []
    for result in record["results"]:
        cells = {}
        for row in result["rows"]:
            cell = f"{row['bleu']:.2f}"
            if row["name"] != REFERENCE:
                cell += f" ({signed(row['bleu_vs_float32'])}; {percent(row['identical_to_float32'])} same"
                engine = row.get("vs_engine_float32")
                if engine:  # the engine's int8 against its own float32 too
                    cell += f"; vs CT2 float32 {signed(engine['bleu'])}, {percent(engine['identical'])} same"
                cell += ")"
            cells[row["name"]] = cell
        rows.append([os.path.basename(result["run"].rstrip("/")), str(result["sentences"])]
                    + [cells.get(name, "-") for name in names])
    first = record["results"][0] if record["results"] else {}
    decoding = first.get("decoding", {})
    what = (f"each run's test split, its decoding settings (beam {decoding.get('beam_size')}, alpha "
            f"{decoding.get('alpha')}); in process through Translator unless CTranslate2; sacreBLEU "
            f"{first.get('bleu_signature', '-')}; each cell: BLEU (its difference to float32's; the share of "
            "outputs identical to float32's)")
    return what, ["run", "sentences"] + names, rows


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    record = _harness.start("quantize_quality", argv,
                            packages=("tensorflow", "keras", "sacrebleu", "ctranslate2", "sentencepiece"))
    record["limit"] = args.limit
    record["results"] = [measure(run, args.limit, not args.no_ctranslate2) for run in args.runs]
    _harness.finish(record)
    from benchmarks._report_tables import quantize_quality_table

    print("\n" + quantize_quality_table([record], {}) + "\n")
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
