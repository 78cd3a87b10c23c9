"""Served decoding speed: the exported SavedModel (plain and XLA variants) and
CTranslate2 against our in-process search, on the same weights, in the same run.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `serve.py`.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/serve.py [--preset base] [--rounds 7] [--searches beam,greedy]
    KERAS_BACKEND=tensorflow python benchmarks/serve.py --real-text [--preset base] [--train-steps 100000]
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import keras_transformer as kt  # noqa: E402
from keras_transformer.data import SubwordTokenizer  # noqa: E402
from keras_transformer import config as config_lib  # noqa: E402
from keras_transformer.data.splits import SPLITS, prepare  # noqa: E402
from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402
from keras_transformer.decoding.evaluation import corpus_scores  # noqa: E402
from keras_transformer.decoding.shortlist import Shortlist  # noqa: E402
from keras_transformer.decoding import phases  # noqa: E402
from keras_transformer.export.ctranslate2 import ctranslate2_options  # noqa: E402
from keras_transformer.export.warmup import padded_rows  # noqa: E402
from keras_transformer.run import train, trained  # noqa: E402
from keras_transformer.run.data import read_pairs  # noqa: E402
from keras_transformer.run.shortlist import build_run_shortlist  # noqa: E402
from keras_transformer.run.translate import translate_texts  # noqa: E402
from keras_transformer.training.precision import choose_precision  # noqa: E402
from benchmarks import _harness  # noqa: E402
from benchmarks._report_serve import serve_real_table, serve_table  # noqa: E402

SHARED_DATA = os.path.join(ROOT, "..", "shared", "data")
EOS, PAD = 3, 0
CACHE = Path("~/.cache/keras-transformer-benchmarks").expanduser()
RATIO_RANGE = (0.8, 1.2)  # --real-text: the output/reference length ratio a timed model must have
AT_LIMIT_MAX = 0.02  # --real-text: the share of its outputs that may run to the length limit (loops)


def parse_args(argv=None):
    real = "--real-text" in (sys.argv[1:] if argv is None else argv)
    parser = _harness.workload_options(_harness.parser(__doc__), preset="base" if real else "tiny",
                                       vocabulary_size=8000, batch_size=16 if real else 32, source_tokens=32,
                                       steps=50, beam_size=4, rounds=3 if real else 7)
    parser.add_argument("--real-text", action="store_true", help="the real-text benchmark (docs/benchmarks.md)")
    parser.add_argument("--train-steps", type=_harness.positive(int), default=100000, help="--real-text: the model's")
    parser.add_argument("--sentences", type=_harness.positive(int), help="--real-text: the first N test sources only")
    parser.add_argument("--allow-any-length-ratio", action="store_true", help="--real-text: time a model whose "
                        "output/reference length ratio is outside 0.8-1.2 or whose outputs loop (the record says so)")
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--plain-phases", default="shipped", help="--real-text: the plain exports' phases, shipped "
                        "(the default ladder) or finer (export --finer-phases), or both, comma-separated: one "
                        "contender each")
    parser.add_argument("--xla-phase-buckets", default="3", help="--real-text: the XLA exports' row buckets per "
                        "decoding phase (export --xla-phase-buckets), or several, comma-separated: one contender each")
    parser.add_argument("--searches", default="beam,greedy")
    parser.add_argument("--no-ctranslate2", action="store_true")
    parser.add_argument("--quantize", choices=("int8", "int8_weights", "bfloat16"), action="append", default=[],
                        help="also the SavedModel variants exported with this mode (repeatable)")
    parser.add_argument("--no-in-process", action="store_true",
                        help="leave out ours in process (the served variants and CTranslate2 only)")
    parser.add_argument("--variants", default="plain,XLA",
                        help="the SavedModel exports timed (with --real-text, each without and with the run's "
                             "shortlist): plain or XLA (float32 and every --quantize precision), or VARIANT:PRECISION")
    args = parser.parse_args(argv)
    if args.record is None:
        args.record = _harness.default_path("serve_real" if real else "serve")
    return args


def corpus_texts(skip, count):
    """`count` (English, German) pairs of the shared corpus after the first `skip`, and its path;
    ([], None) without it."""
    import glob
    import itertools

    from keras_transformer.data import read_jsonl

    paths = sorted(glob.glob(os.path.join(SHARED_DATA, "*en_de*.jsonl.gz")))
    if not paths:
        return [], None
    return list(itertools.islice(read_jsonl(paths[0], source_key="en", target_key="de"), skip, skip + count)), paths[0]


def tokenizer_for(vocabulary_size):
    """A SentencePiece model of `vocabulary_size` pieces (shared corpus if present, else synthetic)."""
    pairs, path = corpus_texts(0, 20000)
    if path:
        origin = f"{os.path.relpath(path, ROOT)} (first {len(pairs)} pairs)"
    else:
        from keras_transformer.datasets.synthetic_en_de import generate_pairs

        pairs = generate_pairs(20000, seed=0)
        origin = "synthetic_en_de.generate_pairs(20000)"
    tokenizer = SubwordTokenizer.train(pairs, vocabulary_size, hard_vocab_limit=False, seed=0,
                                       input_sentence_size=200_000)
    return tokenizer, origin


def make_model(vocabulary_size, preset="tiny"):
    keras.utils.set_random_seed(0)
    model = kt.Transformer.from_preset(preset, vocabulary_size=vocabulary_size)
    embeddings = model.target_embedding.embeddings
    values = keras.ops.convert_to_numpy(embeddings).copy()
    values[EOS] = 0.0  # logit 0: never among the best candidates (see the module docstring)
    embeddings.assign(values)
    return model


def exports(args):
    """[(variant, precision or None)] of `--variants`: "plain" / "XLA" in float32
    and every `--quantize` precision, or "VARIANT:PRECISION" for one."""
    pairs = []
    for entry in args.variants.split(","):
        variant, _, precision = entry.partition(":")
        if variant not in ("plain", "XLA") or precision not in ("", "float32", *args.quantize):
            raise SystemExit(f"--variants: {entry!r} is not plain or XLA[:float32 or a --quantize precision]")
        if precision:
            pairs.append((variant, None if precision == "float32" else precision))
        else:
            pairs += [(variant, quantize) for quantize in [None, *args.quantize]]
    return pairs


def contenders_for(search, model, tokenizer, sources, args, work):
    """{name: a call that decodes `sources`} for one search."""
    from keras_transformer.export import export_saved_model

    beam = args.beam_size if search == "beam" else 1
    max_extra = args.steps - args.source_tokens
    options = dict(max_extra_length=max_extra)
    if beam > 1:
        options.update(beam_size=beam, alpha=args.alpha)
    run_search = beam_search if beam > 1 else greedy_search
    ids = tf.constant(sources)

    def ours(jit_compile):
        return lambda: np.asarray(keras.ops.convert_to_numpy(
            run_search(model, ids, jit_compile=jit_compile, **options)["ids"]))

    contenders = {}
    if not args.no_in_process:
        contenders["ours in process, XLA"] = ours(True)
        contenders["ours in process, plain graph"] = ours(False)
    for variant, quantize in exports(args):
        export_dir = export_saved_model(
            model, tokenizer, os.path.join(work, f"{search}-{variant}-{quantize}"), beam_size=beam, alpha=args.alpha,
            max_extra_length=max_extra, max_input_length=args.source_tokens, warmup_rows=8,
            jit_compile=variant == "XLA", quantize=quantize)
        signature = tf.saved_model.load(export_dir).signatures["translate_ids"]
        name = f"SavedModel {variant} variant" + (f", {quantize}" if quantize else "")
        contenders[name] = lambda signature=signature: signature(source_ids=ids)["ids"].numpy()
    if args.no_ctranslate2:
        return contenders
    try:
        import ctranslate2
    except ImportError:
        print("# CTranslate2 is not installed: its rows are left out (pip install ctranslate2)")
        return contenders
    from keras_transformer.export.ctranslate2 import export_ctranslate2

    pieces = tokenizer.vocabulary()
    tokens = [[pieces[t] for t in row if t not in (EOS, PAD)] for row in sources]
    ct2_dir = os.path.join(work, "ctranslate2")
    if not os.path.isdir(ct2_dir):
        export_ctranslate2(model, tokenizer, ct2_dir)
    for compute_type in ("float32", "int8"):
        translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                                            intra_threads=os.cpu_count())
        kwargs = ctranslate2_options(beam, args.alpha, max_extra, source_length=args.source_tokens)
        kwargs.update(max_batch_size=len(tokens))

        def call(translator=translator, kwargs=kwargs):
            results = translator.translate_batch(tokens, **kwargs)
            return [[tokenizer.piece_to_id(p) for p in r.hypotheses[0]] for r in results]

        contenders[f"CTranslate2 {compute_type}"] = call
    return contenders


def trained_run(args, decoding):
    """--real-text: the run directory of our model, trained by the package's run API (recipes/parallel_text's
    config and split of the shared ddtp_en_de corpus, `--preset`, `--train-steps` steps), with its shortlist and
    its `length_gate` (gate.json); cached under CACHE, reused when present."""
    run, corpus = CACHE / f"real-text-{args.preset}-{args.train_steps}", f"{SHARED_DATA}/ddtp_en_de.jsonl.gz"
    continue_from_shorter(CACHE, args.preset, args.train_steps)
    if not (run / "gate.json").is_file():  # a run cut short resumes from its newest checkpoint
        config = config_lib.resolve([os.path.join(ROOT, "recipes", "parallel_text", "config.yaml")], assignments=[
            f"model.preset={args.preset}", f"training.max_steps={args.train_steps}", "training.max_minutes=null"])
        config = choose_precision(config, [])  # as recipes/parallel_text picks it: bfloat16 where the CPU has it
        data = config["data"]
        if not (run / "data" / "split.json").is_file():  # written again, the files would differ (gzip's time)
            prepare(run / "data", [corpus], source_key=data["source_key"], target_key=data["target_key"],
                    max_chars=data["max_chars"])  # the recipe's test and validation sizes
        train.train(config_lib.merge(config, {"output_dir": str(run), "decoding": decoding, "data": {
            name: str(run / "data" / f"{name}.jsonl.gz") for name in SPLITS}}, origin="serve.py --real-text"))
        build_run_shortlist(run)
    gate = json.loads((run / "gate.json").read_text()) if (run / "gate.json").is_file() else {}
    if "precision" not in gate:  # a new run, or a gate of an older version (no at_limit; decoded as saved)
        gate = length_gate(run)
        (run / "gate.json").write_text(json.dumps(gate))
    return run, gate


def continue_from_shorter(cache, preset, steps):
    """A run folder of `steps` steps that is not in `cache` yet starts as a copy of the longest cached run of the
    same preset with fewer steps and a checkpoint (data, tokenizer, checkpoints; not its gate, final model or list),
    its prepared data's manifest pointing at the copy: training goes on from there, on the same schedule, instead of
    from scratch. Returns the folder copied, or None."""
    run, shorter = cache / f"real-text-{preset}-{steps}", []
    for folder in cache.glob(f"real-text-{preset}-*"):
        count = folder.name.rsplit("-", 1)[1]
        if count.isdigit() and int(count) < steps and any((folder / "checkpoints").glob("*.weights.h5")):
            shorter.append((int(count), folder))
    if run.exists() or not shorter:
        return None
    source = max(shorter)[1]
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("gate.json", "model.keras", "shortlist.txt"))
    for manifest in run.glob("prepared/*/manifest.json"):  # it names its input files, which must not change
        manifest.write_text(manifest.read_text().replace(str(source), str(run)))
    return source


def length_gate(run):
    """What `check_gate` judges, on the validation split translated as the run's config says: the output/reference
    length ratio (sacreBLEU's), BLEU, and the share of outputs that ran to their length limit (within one token of
    the source's tokens and EOS plus `max_extra_length`: a loop, not a translation), and the precision it decoded
    in (float32: the run's model as `trained.load_run` gives it, whatever the training's policy)."""
    model, tokenizer, config = trained.load_run(run)
    pairs, limit = read_pairs(config, "valid"), config["data"]["max_length"]
    outputs = translate_texts(model, tokenizer, [s for s, _ in pairs], config["decoding"], max_source_length=limit)
    score = sacrebleu.BLEU().corpus_score(outputs, [[t for _, t in pairs]])
    tokens = lambda texts: tokenizer.tokenize(texts).row_lengths().numpy()  # noqa: E731
    limits = np.minimum(tokens([s for s, _ in pairs]) + 1, limit) + config["decoding"]["max_extra_length"]
    return {"length_ratio": score.sys_len / score.ref_len, "split": "valid", "sentences": len(pairs),
            "bleu": score.score, "at_limit": float(np.mean(tokens(outputs) + 1 >= limits - 1)),
            "precision": model.dtype_policy.compute_dtype}


def requests_of(sources, batch_size):
    """The request stream: `sources` in order, `batch_size` a request (the last one shorter)."""
    return [sources[start:start + batch_size] for start in range(0, len(sources), batch_size)]


def check_gate(gate, allow_any=False):
    """Why a model's outputs do not end where real translations do (`length_gate`: a length ratio outside
    RATIO_RANGE, or more than AT_LIMIT_MAX of the outputs run to their limit), or None when they do or `allow_any`."""
    ratio, at_limit = gate["length_ratio"], gate["at_limit"]
    in_range = RATIO_RANGE[0] <= ratio <= RATIO_RANGE[1]
    if allow_any or (in_range and at_limit <= AT_LIMIT_MAX):
        return None
    if not in_range:
        why = f"output/reference length ratio is {ratio:.3f}, outside {RATIO_RANGE[0]}-{RATIO_RANGE[1]}"
    else:
        why = (f"outputs run to their length limit in {at_limit:.1%} of the validation sentences (at most "
               f"{AT_LIMIT_MAX:.0%})")
    return (f"the model's {why}: its sentences do not end where real translations end, so its timings would not be "
            "real-text ones; train longer (--train-steps) or pass --allow-any-length-ratio")


def training_state(run):
    """The run's training where its progress log ends: steps, the last validation, precision and batch size."""
    training = json.loads((run / "config.json").read_text())["training"]
    rows = [json.loads(line) for line in (run / "progress.jsonl").read_text().splitlines() if line.strip()]
    state = {"steps": max(row["step"] for row in rows), "precision": training["mixed_precision"],
             "tokens_per_batch": training["tokens_per_batch"]}
    validated = [row for row in rows if "val_loss" in row]
    if validated:
        state.update(validated_at=validated[-1]["step"], val_loss=validated[-1]["val_loss"],
                     val_masked_accuracy=validated[-1]["val_masked_accuracy"])
    return state


def sentence_steps(lengths, requests, rule):
    """The sentence-steps a search decodes for outputs of `lengths` tokens (EOS included), `requests` sizes in
    order, when it drops the sentences that are done by `rule`: "each step" (CTranslate2), "phases" (at the
    boundaries of PHASE_CAPACITIES: the plain graph), "finer phases" (FINER_PHASE_CAPACITIES': the plain graph
    exported with finer_phases), or an int, the XLA variant's row buckets per phase over
    its padded rows (1: the whole padded request every step). A count of carried work, not a time."""
    total, start = 0, 0
    boundaries = phases.FINER_PHASE_CAPACITIES if rule == "finer phases" else phases.PHASE_CAPACITIES
    for size in requests:
        request, start = lengths[start:start + size], start + size
        rows, carried = padded_rows(size) if isinstance(rule, int) else size, size
        for step in range(max(request)):
            if rule == "each step" or step in boundaries:
                carried = sum(int(length > step) for length in request)  # ints: the record is JSON
            if not isinstance(rule, int):
                total += carried
            else:  # the first phase decodes every padded row; a later one the smallest bucket holding the rest
                buckets = [max(rows >> k, 1) for k in range(rule)]
                total += rows if step < phases.PHASE_CAPACITIES[0] else min(b for b in buckets if b >= carried)
    return total


def differences(texts, names):
    """For each pair of `names` (contenders that should agree: float32, the same list) in `texts` ({name: [text]}):
    how many sentences differ, and the chrF of the second's texts against the first's (100.0: all the same)."""
    return [{"pair": [a, b], "differing": sum(x != y for x, y in zip(texts[a], texts[b])), "of": len(texts[a]),
             "chrf_between": round(sacrebleu.corpus_chrf(texts[b], [texts[a]]).score, 2)}
            for index, a in enumerate(names) for b in names[index + 1:]]


def real_text_contenders(args, run, decoding, work):
    """{name: ((path, precision, shortlist, dropping rule), translate)} of --real-text (the rule: `sentence_steps`'),
    `translate` taking a request's texts and returning theirs: the SavedModels (their text signature), CTranslate2
    (with SentencePiece)."""
    import ctranslate2  # optional: here only
    import sentencepiece

    model, tokenizer, config = trained.load_run(run)
    contenders, listed = {}, str(run / "shortlist.txt")
    counts = [int(count) for count in args.xla_phase_buckets.split(",")]
    ladders = args.plain_phases.split(",")
    if not set(ladders) <= {"shipped", "finer"}:
        raise SystemExit(f"--plain-phases: {args.plain_phases!r} is not shipped, finer or both")
    for variant, quantize, shortlist, buckets in [(v, q, s, b) for v, q in exports(args) for s in (None, listed)
                                                  for b in (counts if v == "XLA" else ladders)]:
        signature = tf.saved_model.load(trained.export(
            run, f"{work}/{variant}-{quantize}-{bool(shortlist)}-{buckets}", decoding=decoding, quantize=quantize,
            jit_compile=variant == "XLA", check_ops=False, warmup_rows=args.batch_size, shortlist=shortlist,
            xla_phase_buckets=buckets if variant == "XLA" else None,
            finer_phases=buckets == "finer")).signatures["serving_default"]  # text in, text out: what users send
        named = (f", {buckets} phase buckets" * (len(counts) > 1) if variant == "XLA"
                 else f", {buckets} phases" * (len(ladders) > 1))
        contenders[f"SavedModel {variant}, {quantize or 'float32'}{named}" + " + shortlist" * bool(shortlist)] = (
            (f"{variant}{' graph' * (variant == 'plain')}, SavedModel", quantize or "float32", bool(shortlist),
             ("finer phases" if buckets == "finer" else "phases") if variant == "plain" else buckets),
            lambda texts, signature=signature: [
                text.decode() for text in signature(text=tf.constant(texts))["translations"].numpy()])
    ct2_dir = trained.export_ctranslate2(run, os.path.join(work, "ctranslate2"), decoding=decoding)
    pieces, limit = tokenizer.vocabulary(), config["data"]["max_length"] - 1  # the engine appends EOS
    Path(ct2_dir, "vmap.txt").write_text("\n".join(Shortlist.load(listed).ctranslate2_vmap(pieces, pieces)) + "\n")
    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(ct2_dir, "sentencepiece.model"))
    for compute_type, use_vmap in [("float32", False), ("float32", True), ("int8", False), ("int8", True)]:
        engine = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                                        intra_threads=os.cpu_count())

        def translate(texts, engine=engine, use_vmap=use_vmap):
            tokens = [row[:limit] for row in processor.encode(texts, out_type=str)]
            results = engine.translate_batch(tokens, max_batch_size=len(tokens), use_vmap=use_vmap, **(
                ctranslate2_options(args.beam_size, args.alpha, decoding["max_extra_length"], max(map(len, tokens)) + 1)))
            return [processor.decode(result.hypotheses[0]) for result in results]

        contenders[f"CTranslate2 {compute_type}" + " + vmap" * use_vmap] = (
            ("CTranslate2 (C++)", compute_type, use_vmap, "each step"), translate)
    return contenders, tokenizer


def real_text(args, argv):
    """--real-text: docs/benchmarks.md, "Methods", `serve.py --real-text`."""
    tf.config.threading.set_intra_op_parallelism_threads(os.cpu_count())  # CTranslate2's intra_threads too
    decoding = dict(beam_size=args.beam_size, alpha=args.alpha, length_penalty="length", max_extra_length=50)
    run, gate = trained_run(args, decoding)
    record = _harness.start("serve_real", argv, packages=("tensorflow", "keras", "ctranslate2"))
    record["workload"] = {"preset": args.preset, "train_steps": args.train_steps, "gate": gate, "smoke": args.preset
                          != "base", "training": training_state(run)}
    refusal = check_gate(gate, args.allow_any_length_ratio)
    if refusal:  # recorded: how far the model's training got is a finding too (the serve-real-gate table)
        record["refused"] = refusal
        _harness.save(args.record, _harness.finish(record))
        raise SystemExit(refusal)
    pairs = read_pairs(trained.load_run(run)[2], "test")[:args.sentences]
    requests, references, texts = requests_of([s for s, _ in pairs], args.batch_size), [t for _, t in pairs], {}
    record["workload"].update({
        "length_ratio_allowed_any": args.allow_any_length_ratio, "batch": args.batch_size, "sentences": len(pairs),
        "stream": f"the first {len(pairs)} sources of the parallel_text test split, in order",
        "threads": os.cpu_count(), "decoding": decoding, "options": vars(args)})
    with tempfile.TemporaryDirectory() as work:
        contenders, tokenizer = real_text_contenders(args, run, decoding, work)
        seconds = _harness.take_turns({name: lambda name=name, translate=translate: texts.__setitem__(
            name, [text for request in requests for text in translate(request)])
            for name, (_, translate) in contenders.items()}, args.rounds, None)[0]
    sizes = [len(request) for request in requests]
    lengths = {name: tokenizer.tokenize(texts[name]).row_lengths().numpy() for name in contenders}  # EOS not counted
    record["contenders"] = {name: dict(zip(("path", "precision", "shortlist"), described), seconds=seconds[name],
                                       target_tokens=int(lengths[name].sum()),
                                       sentence_steps=sentence_steps(list(lengths[name] + 1), sizes, described[3]),
                                       **{key: value for key, value in corpus_scores(texts[name], references).items()
                                          if key in ("bleu", "chrf")})
                            for name, (described, _) in contenders.items()}
    record["float32_differences"] = [found for listed in (False, True) for found in differences(texts, [
        name for name, (described, _) in contenders.items() if described[1:3] == ("float32", listed)])]
    print("".join(f"# {a} / {b}: {found['differing']} of {found['of']} sentences differ (chrF between them "
                  f"{found['chrf_between']})\n" for found in record["float32_differences"] for a, b in [found["pair"]]))
    _harness.finish(record)
    print("\n" + serve_real_table([record], {}) + "\n")
    _harness.save(args.record, record)


def main(argv=None):
    args = parse_args(argv)
    if keras.backend.backend() != "tensorflow":
        raise SystemExit("run with KERAS_BACKEND=tensorflow (the export is a TensorFlow SavedModel)")
    if args.real_text:
        return real_text(args, argv)
    tokenizer, origin = tokenizer_for(args.vocabulary_size)
    model = make_model(tokenizer.vocabulary_size, args.preset)
    rng = np.random.default_rng(0)
    sources = rng.integers(4, tokenizer.vocabulary_size, size=(args.batch_size, args.source_tokens)).astype("int32")
    sources[:, -1] = EOS
    record = _harness.start("serve", argv, packages=("tensorflow", "keras", "ctranslate2"))
    record["workload"] = {"preset": args.preset, "vocabulary": tokenizer.vocabulary_size, "tokenizer_corpus": origin,
                          "batch": args.batch_size, "source_tokens": args.source_tokens, "steps": args.steps,
                          "beam_size": args.beam_size, "alpha": args.alpha}
    record["seconds"] = {}
    with tempfile.TemporaryDirectory() as work:
        for search in args.searches.split(","):
            contenders = contenders_for(search, model, tokenizer, sources, args, work)
            record["seconds"][search] = _harness.take_turns(contenders, args.rounds, args.steps)[0]
    _harness.finish(record)
    print(f"# {args.preset} preset, random weights, {tokenizer.vocabulary_size}-piece vocabulary; {args.batch_size} "
          f"sources of {args.source_tokens} tokens, exactly {args.steps} generated tokens each; beam "
          f"{args.beam_size} alpha {args.alpha}, greedy")
    print("\n" + serve_table([record], {}) + "\n")
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
