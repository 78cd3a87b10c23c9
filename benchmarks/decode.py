"""Decoding throughput: our greedy / beam search against KerasHub's samplers and OpenNMT-tf.

Every contender decodes the same batch with the same model or one of the same
size (random weights, "tiny" preset: d_model 256, 3+3 layers, 4 heads, d_ff
1024) and generates
exactly `--steps` tokens per sentence: EOS (and pad, BOS) are forbidden, so
every contender does the same work. Each contender is compiled and run once
first (not timed); then rounds of one run per contender are timed, and the
best wall-clock time per contender is reported with its CPU time (the
process's user+system seconds, less sensitive to other load on the machine).

Contenders (TensorFlow backend; every row names its path: XLA or a plain
graph, Python or C++):
- ours: `keras_transformer.decoding.greedy_search` / `beam_search`, cached,
  as a plain `tf.function` graph (the export path, no XLA) and with XLA;
  and uncached (the whole decoder re-run at every step, as tutorials do);
  and the same weights under the `mixed_bfloat16` policy (bfloat16 matmuls,
  float32 scores), which CPUs with AVX512-BF16/AMX run faster: other
  numerics than the float32 contenders, so its rows are labelled and their
  outputs are not compared (`--no-bfloat16` leaves them out).
- KerasHub: `keras_hub.samplers.GreedySampler` / `BeamSampler` under
  `tf.function(jit_compile=True)` driving (a) KerasHub's own
  `TransformerEncoder` / `TransformerDecoder` layers with their caches, in
  the like-for-like model of benchmarks/_contender_keras_hub.py (our size,
  tied embedding, sinusoidal positions; random weights); (b) our
  model's step API (`Transformer.incremental_decoder`), the one our
  searches drive, so that the loops themselves are compared.
- OpenNMT-tf 2.32 (TensorFlow 2.13, in its own virtual environment
  `.venv-opennmt`, skipped with a message when it is missing): a worker
  process (benchmarks/_opennmt_decode.py) builds `opennmt.models.Transformer`
  of the same size (post-norm, shared embeddings, random weights) and decodes
  the same batch with OpenNMT-tf's own inference path, `model.infer` in a
  `tf.function` as its `predict_dataset` does (no XLA: OpenNMT-tf cannot
  compile its decoding with XLA), beam 4 with length penalty 0.6 and greedy,
  `minimum_decoding_length` = `maximum_decoding_length` = `--steps`. The
  worker stays up for the whole run and is driven over a pipe, so its runs
  interleave with the other contenders' rounds; it times each decode itself
  (wall and its own CPU seconds).

- CTranslate2 4.x (`pip install ctranslate2`; skipped when missing), the
  C++ engine, running our own weights converted through its model spec
  (`keras_transformer.export.ctranslate2.model_spec`), float32 and int8,
  `intra_threads` = CPU count, `min_decoding_length` = `max_decoding_length`
  = `--steps`.

The table gives each contender's best round; the record appended to
`--record` (default benchmarks/results/decode.jsonl: machine, load, commit,
command) keeps every round's wall and CPU seconds.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/decode.py [--rounds 3]

The OpenNMT-tf environment:
    python3 -m venv .venv-opennmt && .venv-opennmt/bin/pip install "tensorflow==2.13.1" "opennmt-tf==2.32.0"
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import keras_transformer as kt  # noqa: E402
from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402
from keras_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from benchmarks import _records  # noqa: E402
from benchmarks._decode_keras_hub import keras_hub_contenders  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50, help="tokens generated per sentence")
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per contender")
    parser.add_argument(
        "--uncached-batch-size", type=int, default=8,
        help="sentences for the uncached beam contender (it is ~20x slower)",
    )
    parser.add_argument("--skip-uncached", action="store_true")
    parser.add_argument("--no-bfloat16", action="store_true", help="leave out the mixed_bfloat16 rows")
    parser.add_argument("--only", default="", help="'|'-separated substrings of contender names")
    parser.add_argument(
        "--opennmt-python", default=os.path.join(ROOT, ".venv-opennmt", "bin", "python"),
        help="Python of the OpenNMT-tf 2.32 environment (its contenders are skipped if it is missing)",
    )
    parser.add_argument("--length-penalty", type=float, default=0.6, help="for OpenNMT-tf's beam search")
    parser.add_argument("--record", default=_records.default_path("decode"),
                        help="JSON-lines file the run's record (every round's wall and CPU seconds) is appended "
                             "to (default %(default)s; '' for none)")
    return parser.parse_args()


class OpenNMTWorker:
    """benchmarks/_opennmt_decode.py running in the OpenNMT-tf environment, driven over a pipe.

    The process is started by `start()` and kept for the whole run, so its
    decodes interleave with the other contenders'; each answer carries the
    worker's own wall and CPU seconds for one decode.
    """

    def __init__(self, python, source, args):
        self.python = python
        self.config = {
            "source": np.asarray(source).tolist(), "steps": args.steps,
            "vocabulary_size": args.vocabulary_size, "beam_size": args.beam_size,
            "length_penalty": args.length_penalty, "seed": 0,
        }
        self.steps = args.steps
        self.process = None
        self.log = None

    def start(self):
        self.log = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH="")
        env.pop("KERAS_BACKEND", None)
        self.process = subprocess.Popen(
            [self.python, os.path.join(HERE, "_opennmt_decode.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
        )
        return self._request(json.dumps(self.config), "READY")

    def _request(self, line, expected):
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        for answer in self.process.stdout:
            tag, _, payload = answer.partition(" ")
            if tag in (expected, "ERROR"):
                payload = json.loads(payload)
                if tag == "ERROR":
                    raise RuntimeError(f"OpenNMT-tf worker: {payload['message']}")
                return payload
        self.log.seek(0)
        raise RuntimeError(
            f"OpenNMT-tf worker exited (status {self.process.wait()}) without answering {line[:20]!r}:\n"
            + self.log.read()[-3000:]
        )

    def decode(self, kind):
        result = self._request(kind, "RESULT")
        ids, lengths = np.asarray(result["ids"]), np.asarray(result["lengths"])
        if ids.shape != (len(self.config["source"]), self.steps) or not np.all(lengths == self.steps):
            raise RuntimeError(f"OpenNMT-tf {kind}: output ids {ids.shape}, lengths "
                               f"{sorted(set(lengths.tolist()))}; expected all {self.steps} tokens")
        return {"ids": ids, "wall_s": result["wall_s"], "cpu_s": result["cpu_s"]}

    def close(self):
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
            self.process.wait(timeout=60)


def opennmt_contenders(worker, args):
    return [
        ("OpenNMT-tf 2.32 greedy, tf.function (no XLA)", "greedy", lambda: worker.decode("greedy")),
        (f"OpenNMT-tf 2.32 beam {args.beam_size}, tf.function (no XLA)", "beam", lambda: worker.decode("beam")),
    ]


def ctranslate2_contenders(model, source, args, work_dir):
    """CTranslate2 on our weights (converted with `export_ctranslate2`'s model
    spec), float32 and int8, on the same source ids as token strings; its
    options force exactly `--steps` tokens as ours do (EOS held back by
    `min_decoding_length`, pad and BOS suppressed)."""
    try:
        import ctranslate2
    except ImportError:
        return [], "# CTranslate2 contenders skipped: pip install ctranslate2"
    from keras_transformer.export.ctranslate2 import model_spec

    special = {PAD_ID: "<pad>", 1: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
    pieces = [special.get(i, f"w{i}") for i in range(args.vocabulary_size)]
    spec = model_spec(model, pieces=pieces)
    spec.validate()
    spec.optimize(quantization="float32")
    spec.save(work_dir)
    tokens = [[pieces[t] for t in row if t not in (PAD_ID, EOS_ID)] for row in source]
    index = {piece: i for i, piece in enumerate(pieces)}
    contenders = []
    for compute_type in ("float32", "int8"):
        translator = ctranslate2.Translator(work_dir, device="cpu", compute_type=compute_type,
                                           inter_threads=1, intra_threads=os.cpu_count())
        for kind, beam in (("greedy", 1), ("beam", args.beam_size)):
            options = dict(beam_size=beam, length_penalty=args.length_penalty, max_batch_size=len(tokens),
                           min_decoding_length=args.steps, max_decoding_length=args.steps,
                           suppress_sequences=[["<pad>"], ["<s>"]])

            def run(translator=translator, options=options):
                results = translator.translate_batch(tokens, **options)
                return {"ids": np.array([[index[p] for p in r.hypotheses[0]] for r in results], "int32")}

            label = "greedy" if beam == 1 else f"beam {beam}"
            contenders.append((f"CTranslate2 {ctranslate2.__version__} {label}, {compute_type} (C++)", kind, run))
    return contenders, f"# CTranslate2 {ctranslate2.__version__}: intra_threads {os.cpu_count()}, our weights"


def bfloat16_copy(model, vocabulary_size):
    """The same weights under the mixed_bfloat16 policy (float32 variables, bfloat16 compute)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        copy = kt.Transformer.from_preset("tiny", vocabulary_size=vocabulary_size)
    finally:
        keras.config.set_dtype_policy(previous)
    copy.set_weights(model.get_weights())  # from_preset returns built models
    return copy


def our_contenders(model, source_ids, args):
    fixed = dict(max_output_length=args.steps, min_length=args.steps)
    small = source_ids[: args.uncached_batch_size]
    contenders = [
        ("ours greedy, graph (no XLA)", "greedy", lambda: greedy_search(model, source_ids, **fixed)),
        ("ours greedy, XLA", "greedy", lambda: greedy_search(model, source_ids, jit_compile=True, **fixed)),
        (f"ours beam {args.beam_size}, graph (no XLA)", "beam",
         lambda: beam_search(model, source_ids, beam_size=args.beam_size, **fixed)),
        (f"ours beam {args.beam_size}, XLA", "beam",
         lambda: beam_search(model, source_ids, beam_size=args.beam_size, jit_compile=True, **fixed)),
    ]
    if not args.no_bfloat16:
        model16 = bfloat16_copy(model, args.vocabulary_size)
        contenders += [
            ("ours greedy, bfloat16, graph (no XLA)", "greedy",
             lambda: greedy_search(model16, source_ids, **fixed)),
            (f"ours beam {args.beam_size}, bfloat16, graph (no XLA)", "beam",
             lambda: beam_search(model16, source_ids, beam_size=args.beam_size, **fixed)),
            (f"ours beam {args.beam_size}, bfloat16, XLA", "beam",
             lambda: beam_search(model16, source_ids, beam_size=args.beam_size, jit_compile=True, **fixed)),
        ]
    if not args.skip_uncached:
        contenders += [
            ("ours greedy, uncached, XLA", "greedy",
             lambda: greedy_search(model, source_ids, use_cache=False, jit_compile=True, **fixed)),
            (f"ours beam {args.beam_size}, uncached, XLA ({len(small)} sentences)", "beam",
             lambda: beam_search(model, small, beam_size=args.beam_size, use_cache=False, jit_compile=True, **fixed)),
        ]
    return contenders


def output_ids(result):
    if isinstance(result, dict):
        return ops.convert_to_numpy(result["ids"])
    ids = ops.convert_to_numpy(result)
    return ids[:, 1:]  # KerasHub prompts start with BOS


def timed(function):
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if isinstance(result, dict) and "wall_s" in result:
        # Another process decoded (OpenNMT-tf): its own timings, not the pipe's.
        wall, cpu = result["wall_s"], result["cpu_s"]
    return wall, cpu, output_ids(result)


def main():
    args = parse_args()
    if keras.backend.backend() != "tensorflow":
        raise SystemExit("run with KERAS_BACKEND=tensorflow (KerasHub contenders use tf.function + XLA)")
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = kt.Transformer.from_preset("tiny", vocabulary_size=args.vocabulary_size)
    rng = np.random.default_rng(0)
    source = rng.integers(4, args.vocabulary_size, size=(args.batch_size, args.source_length)).astype("int32")
    source[:, -1] = EOS_ID
    source_ids = tf.constant(source)

    opennmt = OpenNMTWorker(args.opennmt_python, source, args)
    ct2_dir = tempfile.mkdtemp(prefix="decode-ct2-")
    ct2, ct2_note = ctranslate2_contenders(model, source, args, ct2_dir)
    contenders = (our_contenders(model, source_ids, args) + keras_hub_contenders(model, source_ids, args)
                  + ct2 + opennmt_contenders(opennmt, args))
    if args.only:
        wanted = [w.strip() for w in args.only.split("|") if w.strip()]
        contenders = [c for c in contenders if any(w in c[0] for w in wanted)]
    opennmt_note = None
    if any(name.startswith("OpenNMT-tf") for name, _, _ in contenders):
        if os.path.exists(args.opennmt_python):
            started = opennmt.start()
            opennmt_note = (f"# OpenNMT-tf {started['opennmt']} (TensorFlow {started['tensorflow']}) in "
                            f"{args.opennmt_python}, model built in {started['build_s']:.1f} s; beam length "
                            f"penalty {args.length_penalty}")
        else:
            contenders = [c for c in contenders if not c[0].startswith("OpenNMT-tf")]
            opennmt_note = (f"# OpenNMT-tf contenders skipped: {args.opennmt_python} not found (python3 -m venv "
                            '.venv-opennmt && .venv-opennmt/bin/pip install "tensorflow==2.13.1" '
                            '"opennmt-tf==2.32.0")')
    record = _records.start("decode", packages=("tensorflow", "keras", "keras-hub", "ctranslate2"))
    record["workload"] = {"preset": "tiny", "vocabulary": args.vocabulary_size, "batch": args.batch_size,
                          "source_tokens": args.source_length, "steps": args.steps, "beam_size": args.beam_size,
                          "opennmt_length_penalty": args.length_penalty}
    try:
        run_contenders(contenders, args, "\n".join(n for n in (opennmt_note, ct2_note) if n), record)
    finally:
        opennmt.close()
        import shutil

        shutil.rmtree(ct2_dir, ignore_errors=True)


def run_contenders(contenders, args, opennmt_note, record):
    import tensorflow as tf

    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# tiny model, vocabulary {args.vocabulary_size}, {args.batch_size} sources x {args.source_length} "
          f"tokens, {args.steps} tokens generated, beam {args.beam_size}, best of {args.rounds} rounds")
    if opennmt_note:
        print(opennmt_note)
    first = {}
    outputs = {}
    for name, _, function in contenders:
        seconds, _, ids = timed(function)  # compiles
        first[name] = seconds
        outputs[name] = ids
        print(f"#   compiled + first run {seconds:6.1f} s  {name}", flush=True)
    best = {name: (float("inf"), 0.0) for name, _, _ in contenders}
    rounds = {name: {"wall_s": [], "cpu_s": []} for name, _, _ in contenders}
    for _ in range(args.rounds):
        for name, _, function in contenders:
            seconds, cpu, _ = timed(function)
            rounds[name]["wall_s"].append(seconds)
            rounds[name]["cpu_s"].append(cpu)
            if seconds < best[name][0]:
                best[name] = (seconds, cpu)

    reference = {"greedy": "ours greedy, XLA", "beam": f"ours beam {args.beam_size}, XLA"}
    same_output = {}
    header = (f"{'contender':<58} {'sent/s':>8} {'tok/s':>8} {'cpu s/sent':>10} {'ours XLA is':>11} "
              f"{'(by cpu)':>9}  same output")
    print(header)
    print("-" * len(header))
    for name, kind, _ in contenders:
        seconds, cpu = best[name]
        sentences = outputs[name].shape[0]
        per_second = sentences / seconds
        ref_name = reference[kind]
        ratio = cpu_ratio = ""
        same = ""
        if ref_name in best:
            ref_seconds, ref_cpu = best[ref_name]
            ref_sentences = outputs[ref_name].shape[0]
            ratio = f"{(ref_sentences / ref_seconds) / per_second:10.2f}x"
            cpu_ratio = f"{(cpu / sentences) / (ref_cpu / ref_sentences):8.2f}x"
            ref_ids = outputs[ref_name][:sentences, : args.steps]
            same = "yes" if np.array_equal(outputs[name][:, : args.steps], ref_ids) else "no"
            if "KerasHub layers" in name or name.startswith("OpenNMT-tf"):
                same = "n/a"  # another model
            elif "bfloat16" in name or "int8" in name:
                same = "n/a"  # other numerics: near-ties between tokens can go the other way
        same_output[name] = same or None
        print(f"{name:<58} {per_second:8.1f} {per_second * args.steps:8.0f} {cpu / sentences:10.3f} "
              f"{ratio:>11} {cpu_ratio:>9}  {same}")
    print("ours XLA is: how many times faster our XLA search of the same kind is, by wall-clock "
          "sentences/s and by CPU seconds per sentence")
    # Every round of every contender, so that medians and ranges can be taken
    # later (the table above keeps each one's best round).
    record["contenders"] = {
        name: {"search": kind, "sentences": int(outputs[name].shape[0]), "first_run_s": first[name],
               **rounds[name], "same_output_as_ours_xla": same_output[name]}
        for name, kind, _ in contenders}
    _records.finish(record)
    _records.save(args.record, record)


if __name__ == "__main__":
    main()
