"""`serve.py --shortlist`: a vocabulary shortlist A/B in one run.

The shortlist (`keras_transformer.decoding.shortlist`) is built from the
tokenizer's corpus pairs (the ones `serve.py` trained its SentencePiece
model on), `--shortlist-per-source` target pieces per source piece and the
`--shortlist-frequent` most frequent. A shortlist's effect depends on the
sources (their pieces decide the candidates), so the sources here are real
sentences: the next `--batch-size` pairs of the same corpus after those,
each cut to `--source-tokens` tokens (EOS included); sentences shorter than
are joined to the next ones first. The weights stay random (see `serve.py`).

Contenders, like for like:
- ours in process, XLA (`beam_search`/`greedy_search`, `jit_compile=True`),
  without the shortlist, with it searching in shortlist space, and with it
  scattering into full -inf rows (`keras_transformer.decoding.shortlisted`);
- the SavedModel's plain and XLA variants (`translate_ids`; `--variants`
  picks them), exported without and with the shortlist baked in
  (`export_saved_model(shortlist=...)`; the XLA variant's list padded to
  `--shortlist-size`, default `Shortlist.default_size()`), in float32 and
  each `--quantize` precision, or `VARIANT:PRECISION` entries for some;
  `--no-in-process` leaves ours in process out;
- CTranslate2 int8 and float32 without a vocabulary map, and int8 with the
  same shortlist as its `vmap.txt` (`use_vmap=True`): the only CTranslate2
  contender that runs with a vocabulary map is named "+ vmap".
"""

import os

import numpy as np

EOS, PAD = 3, 0
# serve.py's corpus (the same path; not imported from serve.py, which imports this module).
SHARED_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")


def corpus_pairs(tokenizer, skip, count):
    """Token ids of `count` corpus pairs (both sides) after the first `skip`."""
    import glob

    from keras_transformer.data import read_jsonl

    paths = sorted(glob.glob(os.path.join(SHARED_DATA, "*en_de*.jsonl.gz")))
    if not paths:
        raise SystemExit("--shortlist needs the shared en-de corpus (real sentences): none under " + SHARED_DATA)
    texts = []
    for index, pair in enumerate(read_jsonl(paths[0], source_key="en", target_key="de")):
        if index >= skip:
            texts.append(pair)
        if len(texts) >= count:
            break
    sources = [list(map(int, row)) for row in tokenizer.tokenize([s for s, _ in texts]).to_list()]
    targets = [list(map(int, row)) for row in tokenizer.tokenize([t for _, t in texts]).to_list()]
    return list(zip(sources, targets))


def held_out_sources(tokenizer, skip, batch, length):
    """`batch` sources of `length` tokens (EOS last): consecutive corpus
    sentences after the first `skip` joined until long enough, then cut
    (the corpus's sentences are mostly shorter than a benchmark source)."""
    pairs = corpus_pairs(tokenizer, skip, batch * length)
    rows, current = [], []
    for source, _ in pairs:
        current += source
        if len(current) >= length - 1:
            rows.append(current[: length - 1] + [EOS])
            current = []
            if len(rows) == batch:
                return np.array(rows, dtype="int32")
    raise SystemExit(f"the corpus after pair {skip} is too short for {batch} sources of {length} tokens")


def build(args, tokenizer):
    """(shortlist, real sources (batch, source_tokens) with EOS last)."""
    from keras_transformer.decoding.shortlist import Shortlist

    pairs = corpus_pairs(tokenizer, 0, 20000)
    shortlist = Shortlist.build(pairs, tokenizer.vocabulary_size, tokenizer.vocabulary_size,
                                per_source=args.shortlist_per_source, frequent=args.shortlist_frequent)
    return shortlist, held_out_sources(tokenizer, 20000, args.batch_size, args.source_tokens)


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


def contenders(search, model, tokenizer, shortlist, sources, args, work):
    import keras
    import tensorflow as tf

    from keras_transformer.decoding import beam_search, greedy_search, shortlisted

    beam = args.beam_size if search == "beam" else 1
    max_extra = args.steps - args.source_tokens
    options = dict(max_extra_length=max_extra, jit_compile=True)
    if beam > 1:
        options.update(beam_size=beam, alpha=args.alpha)
    run_search = beam_search if beam > 1 else greedy_search
    ids = tf.constant(sources)

    def ours(space):
        if space is None:
            return lambda: np.asarray(keras.ops.convert_to_numpy(run_search(model, ids, **options)["ids"]))
        return lambda: np.asarray(keras.ops.convert_to_numpy(
            shortlisted.search(run_search, model, shortlist, sources, space=space, **options)["ids"]))

    _, count = shortlist.candidates(sources)
    padded = len(shortlist.candidates(sources)[0])
    print(f"# {search}: {count} candidate pieces for the batch (padded to {padded}) of "
          f"{tokenizer.vocabulary_size}")
    result = {} if args.no_in_process else {
        "ours in process, XLA": ours(None),
        "ours in process, XLA + shortlist (shortlist space)": ours("shortlist"),
        "ours in process, XLA + shortlist (full -inf rows)": ours("full"),
    }
    from keras_transformer.export import export_saved_model

    size = args.shortlist_size or shortlist.default_size()
    if count > size:
        print(f"# the batch's {count} candidates exceed the XLA variant's list of {size}: it takes the full search")
    for variant, quantize in exports(args):
        jit_compile = variant == "XLA"
        for with_shortlist in (False, True):  # the list baked in or not
            export_dir = export_saved_model(
                model, tokenizer, os.path.join(work, f"{search}-{variant}-{quantize}-{with_shortlist}"),
                beam_size=beam, alpha=args.alpha, max_extra_length=max_extra,
                max_input_length=args.source_tokens, warmup_rows=8, jit_compile=jit_compile,
                quantize=quantize, shortlist=shortlist if with_shortlist else None,
                shortlist_size=size if with_shortlist and jit_compile else None)
            signature = tf.saved_model.load(export_dir).signatures["translate_ids"]
            name = (f"SavedModel {variant} variant" + (f", {quantize}" if quantize else "")
                    + (" + shortlist" if with_shortlist else ""))
            result[name] = lambda signature=signature: signature(source_ids=ids)["ids"].numpy()
    if args.no_ctranslate2:
        return result, count
    import ctranslate2

    from keras_transformer.export.ctranslate2 import ctranslate2_options, export_ctranslate2

    pieces = tokenizer.vocabulary()
    tokens = [[pieces[t] for t in row if t not in (EOS, PAD)] for row in sources]
    ct2_dir = os.path.join(work, "ctranslate2")
    if not os.path.isdir(ct2_dir):
        export_ctranslate2(model, tokenizer, ct2_dir)
        # The same shortlist as CTranslate2's vocabulary map; read only with use_vmap=True.
        with open(os.path.join(ct2_dir, "vmap.txt"), "w", encoding="utf-8") as file:
            file.write("\n".join(shortlist.ctranslate2_vmap(pieces, pieces)) + "\n")
    for compute_type, use_vmap in (("float32", False), ("int8", False), ("int8", True)):
        translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                                            intra_threads=os.cpu_count())
        kwargs = ctranslate2_options(beam, args.alpha, max_extra, source_length=args.source_tokens)
        kwargs.update(max_batch_size=len(tokens), use_vmap=use_vmap)

        def call(translator=translator, kwargs=kwargs):
            results = translator.translate_batch(tokens, **kwargs)
            return [[tokenizer.piece_to_id(p) for p in r.hypotheses[0]] for r in results]

        result[f"CTranslate2 {compute_type}" + (" + vmap" if use_vmap else "")] = call
    return result, count
