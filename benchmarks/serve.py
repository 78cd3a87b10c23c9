"""Served decoding speed: the exported SavedModel (plain and XLA variants) and
CTranslate2 against our in-process search, on the same weights, in the same run.

The workload: the `--preset`'s Transformer
("tiny": d_model 256, 3+3 layers, 4 heads, d_ff 1024, the default; "base" and
"big": the paper's sizes, Table 3) with random weights, a batch of `--batch-size`
sources of `--source-tokens` tokens (EOS included), and exactly `--steps`
generated tokens per sentence. Random weights rarely favour EOS; to make it
exact, the EOS row of the shared embedding is set to zeros (its logit is 0,
while the top candidates of 8,000 random logits lie far above), and every
contender's outputs are checked to have `--steps` tokens, so all do the same
work. Every search runs with `max_extra_length = steps - source_tokens`.

Contenders, each named with its path:
- ours in process: `beam_search` / `greedy_search` on ids, compiled with XLA
  (`jit_compile=True`) and as a plain `tf.function` graph;
- the SavedModel of `export_saved_model`, loaded with `tf.saved_model.load`
  in this process (the graph TF Serving would run; no RPC), its
  `translate_ids` signature: the plain variant (what stock TF Serving runs)
  and the XLA variant (`jit_compile=True`: TF Serving with
  `--xla_cpu_compilation_enabled`, or GPU);
- with `--quantize int8|int8_weights|bfloat16` (repeatable), both variants
  exported in that precision too (`export_saved_model(quantize=...)`);
  `--no-in-process` leaves out ours in process (a shorter run at base size);
- CTranslate2 (`pip install ctranslate2`; skipped when missing) running the
  same weights exported with `export_ctranslate2`, float32 and int8
  (`compute_type`), on token strings, `intra_threads` = CPU count.

Rounds interleave the contenders (each round calls every contender once, in
a rotated order), so load from elsewhere hits them alike; the table gives
each contender's median sentences/s over rounds and the median over rounds
of its ratio to ours-XLA and to CTranslate2 float32 measured in the same
round. A JSON record (machine, load, commit, command, raw timings) is
appended to `benchmarks/results/serve.jsonl` (`--record` to change it).

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/serve.py [--preset base] [--rounds 7] [--searches beam,greedy]

Each record also names the matrix libraries behind the figures
(`_harness.matrix_libraries`): the CPU model and its AVX/AVX-512/VNNI/AMX
flags, CTranslate2's CPU backend (Intel MKL only on Intel CPUs, oneDNN
elsewhere) and TensorFlow's oneDNN use; ratios measured on one CPU say
nothing about another.
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import keras_transformer as kt  # noqa: E402
from keras_transformer.data import SubwordTokenizer  # noqa: E402
from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402
from benchmarks import _harness, _serve_shortlist  # noqa: E402

SHARED_DATA = os.path.join(ROOT, "..", "shared", "data")
EOS, PAD = 3, 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=("tiny", "base", "big"), default="tiny",
                        help="model size: tiny (default), or the paper's base and big")
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--source-tokens", type=int, default=32, help="per source, EOS included")
    parser.add_argument("--steps", type=int, default=50, help="generated tokens per sentence")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--searches", default="beam,greedy")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-ctranslate2", action="store_true")
    parser.add_argument("--quantize", choices=("int8", "int8_weights", "bfloat16"), action="append", default=[],
                        help="also the SavedModel variants exported with this mode (repeatable)")
    parser.add_argument("--no-in-process", action="store_true",
                        help="leave out ours in process (the served variants and CTranslate2 only)")
    parser.add_argument("--shortlist", action="store_true",
                        help="the vocabulary shortlist A/B instead (benchmarks/_serve_shortlist.py): real sources, "
                             "ours XLA with and without it, CTranslate2 int8 with and without it as its vmap")
    parser.add_argument("--shortlist-per-source", type=int, default=50)
    parser.add_argument("--shortlist-frequent", type=int, default=100)
    parser.add_argument("--shortlist-size", type=int, default=None,
                        help="with --shortlist: the XLA variant's fixed list size (default Shortlist.default_size())")
    parser.add_argument("--variants", default="plain,XLA",
                        help="with --shortlist: the SavedModel exports timed, each without and with the list: plain "
                             "or XLA (float32 and every --quantize precision), or VARIANT:PRECISION for one")
    parser.add_argument("--record", default=None,
                        help="JSON-lines file the run's record is appended to (default: benchmarks/results/"
                             "serve.jsonl, serve_shortlist.jsonl with --shortlist)")
    args = parser.parse_args(argv)
    if args.record is None:
        args.record = _harness.default_path("serve_shortlist" if args.shortlist else "serve")
    return args


def tokenizer_for(args):
    """A SentencePiece model of `--vocabulary-size` pieces (shared corpus if present, else synthetic)."""
    import glob

    from keras_transformer.data import read_jsonl

    candidates = sorted(glob.glob(os.path.join(SHARED_DATA, "*en_de*.jsonl.gz")))
    if candidates:
        pairs = []
        for pair in read_jsonl(candidates[0], source_key="en", target_key="de"):
            pairs.append(pair)
            if len(pairs) >= 20000:
                break
        origin = f"{os.path.relpath(candidates[0], ROOT)} (first {len(pairs)} pairs)"
    else:
        from keras_transformer.datasets.synthetic_en_de import generate_pairs

        pairs = generate_pairs(20000, seed=0)
        origin = "synthetic_en_de.generate_pairs(20000)"
    tokenizer = SubwordTokenizer.train(pairs, args.vocabulary_size, hard_vocab_limit=False, seed=0,
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


def generated_lengths(ids):
    """Tokens per row of (batch, width) ids up to the first EOS (EOS excluded) or pad."""
    ids = np.asarray(ids)
    lengths = []
    for row in ids:
        row = list(row)
        end = row.index(EOS) if EOS in row else len(row)
        lengths.append(sum(1 for t in row[:end] if t != PAD))
    return lengths


def contenders_for(search, model, tokenizer, sources, args, work):
    import tensorflow as tf

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

    contenders = {} if args.no_in_process else {
        "ours in process, XLA": ours(True),
        "ours in process, plain graph": ours(False),
    }
    for quantize in [None, *args.quantize]:
        for variant, jit_compile in (("plain", False), ("XLA", True)):
            suffix = f", {quantize}" if quantize else ""
            export_dir = export_saved_model(
                model, tokenizer, os.path.join(work, f"{search}-{variant}-{quantize}"), beam_size=beam,
                alpha=args.alpha, max_extra_length=max_extra, max_input_length=args.source_tokens,
                jit_compile=jit_compile, quantize=quantize, warmup_rows=8,
            )
            signature = tf.saved_model.load(export_dir).signatures["translate_ids"]
            contenders[f"SavedModel {variant} variant{suffix} (translate_ids)"] = (
                lambda signature=signature: signature(source_ids=ids)["ids"].numpy()
            )
    if not args.no_ctranslate2:
        try:
            import ctranslate2
        except ImportError:
            print("# CTranslate2 is not installed: its rows are left out (pip install ctranslate2)")
        else:
            from keras_transformer.export.ctranslate2 import ctranslate2_options, export_ctranslate2

            pieces = tokenizer.vocabulary()
            tokens = [[pieces[t] for t in row if t not in (EOS, PAD)] for row in sources]
            ct2_dir = os.path.join(work, "ctranslate2")
            if not os.path.isdir(ct2_dir):
                export_ctranslate2(model, tokenizer, ct2_dir)
            for compute_type in ("float32", "int8"):
                translator = ctranslate2.Translator(
                    ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                    intra_threads=os.cpu_count(),
                )
                kwargs = ctranslate2_options(beam, args.alpha, max_extra, source_length=args.source_tokens)
                kwargs["max_batch_size"] = len(tokens)

                def call(translator=translator, kwargs=kwargs):
                    results = translator.translate_batch(tokens, **kwargs)
                    return [[tokenizer.piece_to_id(p) for p in r.hypotheses[0]] for r in results]

                contenders[f"CTranslate2 {compute_type}"] = call
    return contenders


def run_rounds(contenders, args):
    names = list(contenders)
    for name in names:  # warm-up: traces, XLA compiles, allocates; checks the work done
        output = contenders[name]()
        lengths = generated_lengths(output) if isinstance(output, np.ndarray) else [len(r) for r in output]
        if set(lengths) != {args.steps}:
            raise SystemExit(f"{name} generated {sorted(set(lengths))} tokens, not {args.steps}: unequal work")
    seconds = {name: [] for name in names}
    for round_index in range(args.rounds):
        order = names[round_index % len(names):] + names[: round_index % len(names)]
        for name in order:
            start = time.perf_counter()
            contenders[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def table(search, seconds, batch):
    rates = {name: [batch / s for s in values] for name, values in seconds.items()}
    reference_names = ["ours in process, XLA", "CTranslate2 float32", "CTranslate2 int8"]
    print(f"\n{search}: sentences/s, median of {len(next(iter(rates.values())))} rounds; ratios are medians "
          "of same-round ratios")
    header = ["contender", "sent/s (median)", "range", "vs ours XLA", "vs CTranslate2 float32", "vs CTranslate2 int8"]
    rows = []
    for name, values in rates.items():
        row = [name, f"{np.median(values):.1f}", f"{min(values):.1f}-{max(values):.1f}"]
        for reference in reference_names:
            if reference in rates:
                ratios = np.asarray(values) / np.asarray(rates[reference])
                row.append(f"{np.median(ratios):.2f}x")
            else:
                row.append("-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths]] + rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")


def main(argv=None):
    args = parse_args(argv)
    if keras.backend.backend() != "tensorflow":
        raise SystemExit("run with KERAS_BACKEND=tensorflow (the export is a TensorFlow SavedModel)")
    import tensorflow as tf

    tokenizer, origin = tokenizer_for(args)
    model = make_model(tokenizer.vocabulary_size, args.preset)
    rng = np.random.default_rng(0)
    sources = rng.integers(4, tokenizer.vocabulary_size, size=(args.batch_size, args.source_tokens)).astype("int32")
    sources[:, -1] = EOS
    if args.shortlist:
        shortlist, sources = _serve_shortlist.build(args, tokenizer)
    record = _harness.start("serve_shortlist" if args.shortlist else "serve", argv, packages=("tensorflow", "keras", "ctranslate2"))
    record["workload"] = {"preset": args.preset, "vocabulary": tokenizer.vocabulary_size, "tokenizer_corpus": origin,
                          "batch": args.batch_size, "source_tokens": args.source_tokens, "steps": args.steps,
                          "beam_size": args.beam_size, "alpha": args.alpha}
    record["seconds"] = {}
    if args.shortlist:
        record["workload"].update(sources="corpus pairs 20000+ (real sentences, cut)", shortlist=dict(
            per_source=args.shortlist_per_source, frequent=args.shortlist_frequent,
            built_from="the tokenizer's corpus pairs (first 20000)", candidates={},
            xla_size=args.shortlist_size or shortlist.default_size()))
    with tempfile.TemporaryDirectory() as work:
        for search in args.searches.split(","):
            if args.shortlist:
                contenders, count = _serve_shortlist.contenders(search, model, tokenizer, shortlist, sources, args,
                                                                work)
                record["workload"]["shortlist"]["candidates"][search] = count
            else:
                contenders = contenders_for(search, model, tokenizer, sources, args, work)
            record["seconds"][search] = run_rounds(contenders, args)
    _harness.finish(record)
    load = record["load_average"]
    print(f"# {record['machine']['cpu']}, {os.cpu_count()} CPUs, load average {load['before'][0]:.1f} before, "
          f"{load['after'][0]:.1f} after; TensorFlow {tf.__version__}, "
          f"CTranslate2 {record['versions'].get('ctranslate2', '-')}; commit {record['commit']}")
    libraries = record["libraries"]
    ct2 = libraries.get("ctranslate2") or {}
    print(f"# CPU flags: {' '.join(libraries['cpu_flags'])}; CTranslate2: SGEMM {ct2.get('SGEMM backend', '-')}, "
          f"int8 GEMM {ct2.get('GEMM_S8 backend', '-')}, MKL {ct2.get('Use Intel MKL', '-')}, ISA "
          f"{ct2.get('Selected ISA', '-')}; TensorFlow oneDNN "
          f"{(libraries.get('tensorflow_onednn') or {}).get('is_mkl_enabled', '-')}")
    print(f"# {args.preset} preset, random weights, {tokenizer.vocabulary_size}-piece vocabulary; {args.batch_size} "
          f"sources of {args.source_tokens} tokens, exactly {args.steps} generated tokens each; beam "
          f"{args.beam_size} alpha {args.alpha}, greedy")
    for search, seconds in record["seconds"].items():
        table(search, seconds, args.batch_size)
    print()
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
