"""Candidate changes to the decoding step at the paper's base size, each measured
against the shipped decoder in the same process; and the most that dropping
finished sentences could save on real text, and what the search's dropping
them between phases saves.

    KERAS_BACKEND=tensorflow python benchmarks/decode_variants.py --precision float32 --graphs XLA,plain --rounds 6
    KERAS_BACKEND=tensorflow python benchmarks/decode_variants.py --precision int8 --rounds 6
    KERAS_BACKEND=tensorflow python benchmarks/decode_variants.py --finished-rows ../runs/parallel_text
    KERAS_BACKEND=tensorflow python benchmarks/decode_variants.py --compaction ../runs/parallel_text --sentences 512 --rounds 6

Speed (the default): `serve.py`'s workload (the `--preset`'s Transformer with
seeded random weights and its EOS embedding row zeroed, so every sentence
generates exactly `--steps` tokens; `--batch-size` random sources of
`--source-tokens` tokens; beam `--beam-size`), in `--precision` (float32, or
the int8 copy `quantize_model` makes). Every variant runs `beam_search` on
the same model inside its own `tf.function` (`autograph=False`, one input
signature: what `keras_transformer.decoding.compiled` builds), compiled with
XLA (`--graphs XLA`, the SavedModel XLA variant's path) and optionally as the
plain graph (`--graphs XLA,plain`). A variant patches `IncrementalDecoder`
only while its function is traced, so the shipped code is the reference and
nothing here changes the package:

- unfused-qkv (float32): three products for the self-attention queries, keys
  and values instead of the shipped single product of concatenated kernels;
- fused-int8-qkv (int8): one int8 product for them (the int8 kernels and
  their per-column scales concatenated, the activations quantized once per
  row), where the shipped step calls the three int8 layers (each quantizing
  the same input the same way): CTranslate2's fused QKV;
- untransposed-keys (XLA): keys cached (batch, heads, entries, depth), as in
  the plain graph, instead of the shipped (batch, heads, depth, entries).

Each function is traced, compiled and called once before timing (and its ids
are compared with the shipped decoder's). Then rounds take turns: each round
calls every (graph, variant) once, the order reversed every other round. A
variant's figure is the median over rounds of its rate over the shipped
decoder's rate in the same round and graph.

Finished rows (`--finished-rows RUN_DIR`, `_decode_real_runs.py`): a trained
run's model and tokenizer translate its test split as `Translator` batches it
(sources sorted by length, `decoding.batch_size` per batch, padded to a
multiple of 8), with the run's beam size, alpha and max_extra_length, in the
plain graph; the search loop is wrapped to count, per sentence, the steps it
ran before it was done. The steps spent on sentences already done, over all,
bound what dropping them could save: at any step, and at the search's phase
boundaries (`decoding.phases.PHASE_CAPACITIES`), where the state grows anyway.
`--compaction RUN_DIR` times what the search saves by dropping them: the
shipped beam search (done sentences dropped between phases, as in a plain
graph) against the same search with that switched off (`phases.compacts`
patched while tracing), on the first `--sentences` test sentences, taking
turns. (The records before 9b8e95e time a prototype of it, since replaced.)

Records go to benchmarks/results/decode_variants.jsonl; `report.py` builds
the tables (`table_parts`).
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

VARIANTS = {
    "shipped": "the decoder as shipped (reference)",
    "unfused-qkv": "three products for Q, K, V instead of one",
    "fused-int8-qkv": "one int8 product for Q, K, V (kernels and scales concatenated)",
    "untransposed-keys": "keys cached (batch, heads, entries, depth), not transposed",
}
APPLIES = {  # which (precision, graph) a variant is a candidate for
    "unfused-qkv": lambda precision, graph: precision == "float32",
    "fused-int8-qkv": lambda precision, graph: precision == "int8",
    "untransposed-keys": lambda precision, graph: graph == "XLA",
}


# --------------------------------------------------------------------------- variants


def int8_fused_projection(attention):
    """(quantizer, kernel, scales, bias) of one int8 product for an int8 layer's
    query/key/value Dense layers, or None when they are not plain int8 layers."""
    from keras import ops

    denses = (attention.query_projection, attention.key_projection, attention.value_projection)
    for dense in denses:
        if getattr(dense, "quantization_mode", None) != "int8" or getattr(dense, "lora_enabled", False):
            return None
        if dense.inputs_quantizer is None:  # weight-only int8: no shared activation quantization
            return None
    kernel = ops.concatenate([ops.convert_to_tensor(d._kernel) for d in denses], axis=1)
    scales = ops.concatenate([ops.convert_to_tensor(d.kernel_scale) for d in denses], axis=0)
    bias = None
    if attention.use_bias:
        bias = ops.concatenate([ops.convert_to_tensor(d.bias) for d in denses], axis=0)
    return denses[0].inputs_quantizer, kernel, scales, bias


def int8_fused_project(attention, fused, h):
    """Keras' int8 Dense product (`Dense._int8_call`) on the concatenated kernel."""
    from keras import ops

    quantizer, kernel, scales, bias = fused
    quantized, input_scales = quantizer(h, axis=-1)
    projected = ops.divide(ops.cast(ops.matmul(quantized, kernel), attention.compute_dtype),
                           ops.multiply(scales, input_scales))
    if bias is not None:
        projected = ops.add(projected, bias)
    width = attention.num_heads * attention.key_depth
    return projected[..., :width], projected[..., width : 2 * width], projected[..., 2 * width :]


def is_int8_fusion(fused):
    return isinstance(fused, tuple) and isinstance(fused[0], str) and fused[0] == "int8"


@contextlib.contextmanager
def patched(variant):
    """`IncrementalDecoder` as `variant` changes it, restored on exit."""
    from keras_transformer.models.incremental import IncrementalDecoder as Decoder

    saved = {name: Decoder.__dict__[name] for name in ("_fuse", "_project_query_key_value")}
    try:
        if variant == "unfused-qkv":
            Decoder._fuse = staticmethod(lambda attention: None)
        elif variant == "fused-int8-qkv":
            shipped_fuse, shipped_project = saved["_fuse"].__func__, saved["_project_query_key_value"]

            def fuse(attention):
                int8 = int8_fused_projection(attention)
                return ("int8", attention, int8) if int8 is not None else shipped_fuse(attention)

            def project(self, index, attention, h):
                fused = self.fused_projections[index]
                if is_int8_fusion(fused):
                    return int8_fused_project(attention, fused[2], h)
                return shipped_project(self, index, attention, h)

            Decoder._fuse, Decoder._project_query_key_value = staticmethod(fuse), project
        elif variant == "untransposed-keys":
            # __init__ assigns keys_transposed; this class property ignores that and says False.
            Decoder.keys_transposed = property(lambda self: False, lambda self, value: None)
        elif variant != "shipped":
            raise ValueError(f"unknown variant {variant!r}")
        yield
    finally:
        for name, value in saved.items():
            setattr(Decoder, name, value)
        if "keys_transposed" in Decoder.__dict__:
            del Decoder.keys_transposed


def describe(model, variant, jit_compile, sources):
    """What the decoder `variant` builds: its key cache shape and its Q/K/V products (proof that the patch took)."""
    from keras_transformer.models.incremental import IncrementalDecoder

    with patched(variant):
        decoder = IncrementalDecoder(model, sources[:1], beam_size=2, buffer_length=3, jit_compile=jit_compile)
        keys = tuple(decoder.initial_state[0].shape)
    fused = decoder.fused_projections[0]
    products = "three" if fused is None else ("one int8" if is_int8_fusion(fused) else "one")
    return f"keys {keys}, {products} Q/K/V product(s)"


def search_function(model, variant, jit_compile, options):
    """`beam_search` on ids in a tf.function as `compiled.compiled` builds it, traced under `variant`."""
    import tensorflow as tf

    from keras_transformer.decoding import beam_search

    @tf.function(autograph=False, jit_compile=jit_compile, input_signature=[tf.TensorSpec((None, None), tf.int32)])
    def run(source_ids):
        with patched(variant):
            return beam_search(model, source_ids, jit_compile=jit_compile, **options)["ids"]

    return run


def check_int8_fusion(model):
    """Largest |difference| between the fused int8 product and the three int8 layers, over every
    decoder layer, on random step inputs (equal up to float rounding: the same quantized input,
    the same int32 sums, the same scales)."""
    import numpy as np
    from keras import ops

    rng = np.random.default_rng(1)
    worst = 0.0
    for layer in model.decoder.stacked_layers:
        attention = layer.self_attention
        fused = int8_fused_projection(attention)
        if fused is None:
            raise SystemExit("fused-int8-qkv: the self-attention projections are not int8 layers")
        h = ops.convert_to_tensor(rng.normal(size=(64, 1, model.d_model)).astype("float32"))
        three = (attention.query_projection(h), attention.key_projection(h), attention.value_projection(h))
        for a, b in zip(int8_fused_project(attention, fused, h), three):
            worst = max(worst, float(np.max(np.abs(ops.convert_to_numpy(a) - ops.convert_to_numpy(b)))))
    return worst


def speed(args, record):
    import keras
    import numpy as np
    import tensorflow as tf

    from benchmarks.serve import EOS, generated_lengths, make_model
    from keras_transformer.export.quantize import quantize_model

    model = make_model(args.vocabulary_size, args.preset)
    if args.precision != "float32":
        model = quantize_model(model, args.precision)
    rng = np.random.default_rng(0)
    sources = rng.integers(4, args.vocabulary_size, size=(args.batch_size, args.source_tokens)).astype("int32")
    sources[:, -1] = EOS
    sources = tf.constant(sources)
    options = dict(beam_size=args.beam_size, alpha=args.alpha, max_extra_length=args.steps - args.source_tokens)
    graphs = args.graphs.split(",")
    names = [f"{graph} / {variant}" for graph in graphs for variant in ["shipped"] + args.variants
             if variant == "shipped" or APPLIES[variant](args.precision, graph)]
    functions, checks = {}, {}
    if "fused-int8-qkv" in args.variants and args.precision == "int8":
        checks["fused-int8-qkv max |difference| of the projections"] = check_int8_fusion(model)
    shipped_ids = {}
    for name in names:
        graph, variant = name.split(" / ")
        print(f"tracing and compiling {name} ...", file=sys.stderr, flush=True)
        functions[name] = search_function(model, variant, graph == "XLA", options)
        start = time.perf_counter()
        ids = keras.ops.convert_to_numpy(functions[name](sources))
        compile_seconds = time.perf_counter() - start
        lengths = set(generated_lengths(ids))
        if lengths != {args.steps}:
            raise SystemExit(f"{name}: generated lengths {sorted(lengths)}, not exactly {args.steps} each")
        shipped_ids.setdefault(graph, ids)
        checks[f"{name}: same ids as shipped"] = bool(np.array_equal(ids, shipped_ids[graph]))
        checks[f"{name}: decoder"] = describe(model, variant, graph == "XLA", sources)
        checks[f"{name}: first call seconds (trace + compile + run)"] = round(compile_seconds, 1)
    from benchmarks import _decode_real_runs

    rounds = _decode_real_runs.take_turns(names, lambda name: np.asarray(functions[name](sources)), args.rounds,
                                          args.batch_size)
    record.update({
        "kind": "speed", "precision": args.precision,
        "workload": {"preset": args.preset, "vocabulary": args.vocabulary_size, "batch": args.batch_size,
                     "source_tokens": args.source_tokens, "steps": args.steps, "beam_size": args.beam_size,
                     "alpha": args.alpha, "graphs": graphs},
        "checks": checks, "seconds": rounds,
        "results": [{"name": n, "label": VARIANTS[n.split(" / ")[1]]} for n in names],
    })


# --------------------------------------------------------------------------- table


def table_parts(record):
    """(what, header, rows, align) of a record's table for report.py."""
    workload = record["workload"]
    if record["kind"] == "finished-rows":
        steps = record["row_steps"]
        rows = [["any step", f"{steps['all'] - steps['before_done']:,}", f"{steps['all']:,}",
                 f"{(steps['all'] - steps['before_done']) / steps['all']:.1%}"],
                ["phase boundaries", f"{steps['all'] - steps['kept_when_dropped_at_phase_boundaries']:,}",
                 f"{steps['all']:,}",
                 f"{(steps['all'] - steps['kept_when_dropped_at_phase_boundaries']) / steps['all']:.1%}"]]
        what = (f"{workload['run']}, {workload['split']} split ({workload['sentences']} sentences, "
                f"{workload['model']} preset), beam {workload['beam_size']}, batches of {workload['batch_size']} "
                "as Translator makes them; sentence-steps (x beam = row-steps) after a sentence is done")
        return what, ["dropped at", "steps on done sentences", "all steps", "most saved"], rows, \
            ["---", "---:", "---:", "---:"]
    if record["kind"] == "compaction":
        rounds, sentences = record["seconds"], workload["sentences"]
        rows = []
        for result in record["results"]:
            rates = [sentences / r[result["name"]] for r in rounds]
            ratios = [r["shipped"] / r[result["name"]] for r in rounds]
            rows.append([result["name"], result["label"], f"{statistics.median(rates):.2f}",
                         f"{min(rates):.2f}-{max(rates):.2f}", f"{statistics.median(ratios):.3f}x",
                         f"{min(ratios):.3f}-{max(ratios):.3f}x"])
        what = (f"{workload['run']}, the first {sentences} sentences of its {workload['split']} split "
                f"({workload['model']} preset), beam {workload['beam_size']}, batches of {workload['batch_size']} "
                f"as Translator makes them, {workload['graph']} graph; sentences/s, {len(rounds)} rounds taking "
                f"turns; {record['same_outputs']} of {sentences} outputs identical to the shipped search's")
        return what, ["variant", "what", "sentences/s (median)", "range", "vs shipped", "ratio range"], rows, \
            ["---", "---", "---:", "---:", "---:", "---:"]
    rounds, batch = record["seconds"], workload["batch"]
    rows = []
    for result in record["results"]:
        name = result["name"]
        graph, variant = name.split(" / ")
        reference = f"{graph} / shipped"
        rates = [batch / r[name] for r in rounds]
        ratios = [r[reference] / r[name] for r in rounds]
        same = record["checks"].get(f"{name}: same ids as shipped")
        rows.append([record["precision"], graph, variant, result["label"], f"{statistics.median(rates):.2f}",
                     f"{min(rates):.2f}-{max(rates):.2f}", f"{statistics.median(ratios):.3f}x",
                     f"{min(ratios):.3f}-{max(ratios):.3f}x", "yes" if same else "no"])
    what = (f"{workload['preset']} preset, {workload['vocabulary']}-piece vocabulary, {batch} sources x beam "
            f"{workload['beam_size']}, exactly {workload['steps']} tokens each; sentences/s, one process, "
            f"{len(rounds)} rounds taking turns; ratios are medians of same-round ratios to the shipped decoder")
    header = ["precision", "graph", "variant", "what", "sentences/s (median)", "range", "vs shipped", "ratio range",
              "same ids"]
    return what, header, rows, ["---", "---", "---", "---", "---:", "---:", "---:", "---:", "---"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=("tiny", "base", "big"), default="base")
    parser.add_argument("--vocabulary-size", type=int, default=32000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--source-tokens", type=int, default=32, help="per source, EOS included")
    parser.add_argument("--steps", type=int, default=50, help="generated tokens per sentence")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--precision", choices=("float32", "int8"), default="float32")
    parser.add_argument("--graphs", default="XLA", help="comma-separated: XLA, plain")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS)[1:],
                        help="variants besides the shipped decoder (those that apply to the precision and graph)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--finished-rows", metavar="RUN_DIR",
                        help="instead: the row-steps spent on finished sentences, translating RUN_DIR's test split")
    parser.add_argument("--compaction", metavar="RUN_DIR",
                        help="instead: the shipped beam search against it without dropping done sentences "
                             "between phases, on RUN_DIR's test split (plain graph)")
    parser.add_argument("--sentences", type=int, default=320, help="with --compaction: the first N test sentences")
    parser.add_argument("--record", default=None,
                        help="JSON-lines file the record is appended to (default benchmarks/results/"
                             "decode_variants.jsonl; '' for none)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.variants) - set(VARIANTS) | {g for g in args.graphs.split(",")} - {"XLA", "plain"})
    if unknown:
        parser.error(f"unknown --variants/--graphs {', '.join(unknown)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.steps <= args.source_tokens:
        parser.error("--steps must exceed --source-tokens (max_extra_length = steps - source tokens)")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    if keras.backend.backend() != "tensorflow":
        raise SystemExit("decode_variants.py measures TensorFlow graphs: set KERAS_BACKEND=tensorflow")
    from benchmarks import _decode_real_runs, _records

    keras.utils.set_random_seed(0)
    record = _records.start("decode_variants", argv, packages=("tensorflow", "keras"))
    if args.finished_rows or args.compaction:
        (_decode_real_runs.finished_rows if args.finished_rows else _decode_real_runs.compaction)(args, record)
    else:
        speed(args, record)
    _records.finish(record)
    what, header, rows, align = table_parts(record)
    load = record["load_average"]
    print(f"\n{what}; load average {load['before'][0]:.1f} before, {load['after'][0]:.1f} after\n")
    print(_records.markdown_table(header, rows, align))
    if record["kind"] == "speed":
        print(record["checks"])
    _records.save(_records.default_path("decode_variants") if args.record is None else args.record, record)


if __name__ == "__main__":
    main()
