"""Served decoding speed: the exported SavedModel (plain and XLA variants) and
CTranslate2 against our in-process search, on the same weights, in the same run.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `serve.py`.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/serve.py [--preset base] [--rounds 7] [--searches beam,greedy]
"""

import os
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import keras_transformer as kt  # noqa: E402
from keras_transformer.data import SubwordTokenizer  # noqa: E402
from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402
from benchmarks import _harness  # noqa: E402
from benchmarks._report_tables import serve_table  # noqa: E402

SHARED_DATA = os.path.join(ROOT, "..", "shared", "data")
EOS, PAD = 3, 0


def parse_args(argv=None):
    parser = _harness.workload_options(_harness.parser(__doc__), preset="tiny", vocabulary_size=8000,
                                       batch_size=32, source_tokens=32, steps=50, beam_size=4, rounds=7)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--searches", default="beam,greedy")
    parser.add_argument("--no-ctranslate2", action="store_true")
    parser.add_argument("--quantize", choices=("int8", "int8_weights", "bfloat16"), action="append", default=[],
                        help="also the SavedModel variants exported with this mode (repeatable)")
    parser.add_argument("--no-in-process", action="store_true",
                        help="leave out ours in process (the served variants and CTranslate2 only)")
    parser.add_argument("--shortlist", action="store_true",
                        help="the vocabulary shortlist A/B instead (see the module docstring): real sources, "
                             "ours XLA with and without it, CTranslate2 int8 with and without it as its vmap")
    parser.add_argument("--shortlist-per-source", type=int, default=50)
    parser.add_argument("--shortlist-frequent", type=int, default=100)
    parser.add_argument("--shortlist-size", type=int, default=None,
                        help="with --shortlist: the XLA variant's fixed list size (default Shortlist.default_size())")
    parser.add_argument("--variants", default="plain,XLA",
                        help="the SavedModel exports timed (with --shortlist, each without and with the list): plain "
                             "or XLA (float32 and every --quantize precision), or VARIANT:PRECISION for one")
    args = parser.parse_args(argv)
    if args.record is None:
        args.record = _harness.default_path("serve_shortlist" if args.shortlist else "serve")
    return args


def corpus_texts(skip, count):
    """`count` (English, German) pairs of the shared corpus after the first `skip`, and its path;
    ([], None) without it."""
    import glob

    from keras_transformer.data import read_jsonl

    paths = sorted(glob.glob(os.path.join(SHARED_DATA, "*en_de*.jsonl.gz")))
    if not paths:
        return [], None
    texts = []
    for index, pair in enumerate(read_jsonl(paths[0], source_key="en", target_key="de")):
        if index >= skip:
            texts.append(pair)
        if len(texts) >= count:
            break
    return texts, paths[0]


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


def shortlist_and_sources(args, tokenizer):
    """`--shortlist`: the list built from the tokenizer's corpus pairs, and `--batch-size` real sources
    of `--source-tokens` tokens (EOS last): the corpus sentences after those, joined until long enough
    (they are mostly shorter than a benchmark source), then cut."""
    from keras_transformer.decoding.shortlist import Shortlist

    texts, path = corpus_texts(0, 20000 + args.batch_size * args.source_tokens)
    if not path:
        raise SystemExit("--shortlist needs the shared en-de corpus (real sentences): none under " + SHARED_DATA)

    def ids(sentences):
        return [list(map(int, row)) for row in tokenizer.tokenize(sentences).to_list()]

    pairs = list(zip(ids([s for s, _ in texts[:20000]]), ids([t for _, t in texts[:20000]])))
    shortlist = Shortlist.build(pairs, tokenizer.vocabulary_size, tokenizer.vocabulary_size,
                                per_source=args.shortlist_per_source, frequent=args.shortlist_frequent)
    rows, current, length = [], [], args.source_tokens
    for source in ids([s for s, _ in texts[20000:]]):
        current += source
        if len(current) >= length - 1:
            rows.append(current[: length - 1] + [EOS])
            current = []
            if len(rows) == args.batch_size:
                return shortlist, np.array(rows, dtype="int32")
    raise SystemExit(f"the corpus after pair 20000 is too short for {args.batch_size} sources of {length} tokens")


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


def contenders_for(search, model, tokenizer, sources, args, work, shortlist=None):
    """{name: a call that decodes `sources`} for one search; with a `shortlist`, the A/B of the module
    docstring, and the number of candidate pieces it gives the batch."""
    import tensorflow as tf

    from keras_transformer.decoding import shortlisted
    from keras_transformer.export import export_saved_model

    beam = args.beam_size if search == "beam" else 1
    max_extra = args.steps - args.source_tokens
    options = dict(max_extra_length=max_extra)
    if beam > 1:
        options.update(beam_size=beam, alpha=args.alpha)
    run_search = beam_search if beam > 1 else greedy_search
    ids = tf.constant(sources)

    def ours(jit_compile, space=None):
        if space is None:
            return lambda: np.asarray(keras.ops.convert_to_numpy(
                run_search(model, ids, jit_compile=jit_compile, **options)["ids"]))
        return lambda: np.asarray(keras.ops.convert_to_numpy(shortlisted.search(
            run_search, model, shortlist, sources, space=space, jit_compile=jit_compile, **options)["ids"]))

    contenders, count, size = {}, None, None
    if shortlist is not None:
        _, count = shortlist.candidates(sources)
        size = args.shortlist_size or shortlist.default_size()
        print(f"# {search}: {count} candidate pieces for the batch (padded to "
              f"{len(shortlist.candidates(sources)[0])}) of {tokenizer.vocabulary_size}")
        if count > size:
            print(f"# the batch's {count} candidates exceed the XLA variant's list of {size}: it takes the full search")
    if not args.no_in_process:
        contenders["ours in process, XLA"] = ours(True)
        if shortlist is None:
            contenders["ours in process, plain graph"] = ours(False)
        else:
            contenders["ours in process, XLA + shortlist (shortlist space)"] = ours(True, "shortlist")
            contenders["ours in process, XLA + shortlist (full -inf rows)"] = ours(True, "full")
    for variant, quantize in exports(args):
        jit_compile = variant == "XLA"
        for listed in (False, True) if shortlist is not None else (False,):  # the list baked in or not
            export_dir = export_saved_model(
                model, tokenizer, os.path.join(work, f"{search}-{variant}-{quantize}-{listed}"), beam_size=beam,
                alpha=args.alpha, max_extra_length=max_extra, max_input_length=args.source_tokens, warmup_rows=8,
                jit_compile=jit_compile, quantize=quantize, shortlist=shortlist if listed else None,
                shortlist_size=size if listed and jit_compile else None)
            signature = tf.saved_model.load(export_dir).signatures["translate_ids"]
            name = f"SavedModel {variant} variant" + (f", {quantize}" if quantize else "") + (" + shortlist" if listed else "")
            contenders[name] = lambda signature=signature: signature(source_ids=ids)["ids"].numpy()
    if args.no_ctranslate2:
        return contenders, count
    try:
        import ctranslate2
    except ImportError:
        print("# CTranslate2 is not installed: its rows are left out (pip install ctranslate2)")
        return contenders, count
    from keras_transformer.export.ctranslate2 import ctranslate2_options, export_ctranslate2

    pieces = tokenizer.vocabulary()
    tokens = [[pieces[t] for t in row if t not in (EOS, PAD)] for row in sources]
    ct2_dir = os.path.join(work, "ctranslate2")
    if not os.path.isdir(ct2_dir):
        export_ctranslate2(model, tokenizer, ct2_dir)
        if shortlist is not None:  # the same list as CTranslate2's vocabulary map, read only with use_vmap=True
            with open(os.path.join(ct2_dir, "vmap.txt"), "w", encoding="utf-8") as file:
                file.write("\n".join(shortlist.ctranslate2_vmap(pieces, pieces)) + "\n")
    engines = [("float32", False), ("int8", False)] + ([("int8", True)] if shortlist is not None else [])
    for compute_type, use_vmap in engines:
        translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                                            intra_threads=os.cpu_count())
        kwargs = ctranslate2_options(beam, args.alpha, max_extra, source_length=args.source_tokens)
        kwargs.update(max_batch_size=len(tokens), use_vmap=use_vmap)

        def call(translator=translator, kwargs=kwargs):
            results = translator.translate_batch(tokens, **kwargs)
            return [[tokenizer.piece_to_id(p) for p in r.hypotheses[0]] for r in results]

        contenders[f"CTranslate2 {compute_type}" + (" + vmap" if use_vmap else "")] = call
    return contenders, count


def main(argv=None):
    args = parse_args(argv)
    if keras.backend.backend() != "tensorflow":
        raise SystemExit("run with KERAS_BACKEND=tensorflow (the export is a TensorFlow SavedModel)")
    tokenizer, origin = tokenizer_for(args.vocabulary_size)
    model = make_model(tokenizer.vocabulary_size, args.preset)
    rng = np.random.default_rng(0)
    sources = rng.integers(4, tokenizer.vocabulary_size, size=(args.batch_size, args.source_tokens)).astype("int32")
    sources[:, -1] = EOS
    shortlist = None
    if args.shortlist:
        shortlist, sources = shortlist_and_sources(args, tokenizer)
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
            contenders, count = contenders_for(search, model, tokenizer, sources, args, work, shortlist)
            if args.shortlist:
                record["workload"]["shortlist"]["candidates"][search] = count
            record["seconds"][search] = _harness.take_turns(contenders, args.rounds, args.steps)[0]
    _harness.finish(record)
    print(f"# {args.preset} preset, random weights, {tokenizer.vocabulary_size}-piece vocabulary; {args.batch_size} "
          f"sources of {args.source_tokens} tokens, exactly {args.steps} generated tokens each; beam "
          f"{args.beam_size} alpha {args.alpha}, greedy")
    print("\n" + serve_table([record], {}) + "\n")
    _harness.save(args.record, record)


if __name__ == "__main__":
    main()
