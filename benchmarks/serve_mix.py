"""Mixed traffic against an exported SavedModel, with and without TF Serving's warm-up.

How it measures, and what it reports: docs/benchmarks.md, "Methods", `serve_mix.py`.

Usage:
    python benchmarks/serve_mix.py [--preset tiny] [--requests 40] [--warmup-rows 64]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from benchmarks import _harness  # noqa: E402

VARIANTS = ("plain", "xla")


class SessionServer:
    """A SavedModel loaded as TF Serving loads it: a TF1 session, SignatureDefs run by tensor name."""

    def __init__(self, export_dir):
        import tensorflow as tf

        load_tf_text_ops()
        self.export_dir = export_dir
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        with self.graph.as_default():
            meta_graph = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], export_dir)
        self.signatures = dict(meta_graph.signature_def)

    def predict(self, signature_name, inputs):
        """{output: ndarray} of `signature_name` on {input: array-like}."""
        signature = self.signatures[signature_name]
        missing = set(signature.inputs) - set(inputs)
        if missing:
            raise KeyError(f"{signature_name} needs inputs {sorted(missing)}")
        feeds = {signature.inputs[key].name: value for key, value in inputs.items()}
        fetches = {key: info.name for key, info in signature.outputs.items()}
        return self.session.run(fetches, feed_dict=feeds)

    def warm_up(self):
        """Replays the export's warm-up records; returns [(signature, seconds)]."""
        timings = []
        for signature, inputs in read_warmup_records(self.export_dir):
            start = time.perf_counter()
            self.predict(signature, inputs)
            timings.append((signature, time.perf_counter() - start))
        return timings

    def close(self):
        self.session.close()


def load_tf_text_ops():
    """Registers TF Text's compiled ops (SentencePiece, ...) as TF Serving links them, without its Python package."""
    import glob
    import importlib.util

    import tensorflow as tf

    spec = importlib.util.find_spec("tensorflow_text")
    if spec is None:
        raise ImportError("tensorflow-text is needed: the export's tokenizer runs its ops")
    for library in sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "python", "ops", "_*.so"))):
        tf.load_op_library(library)


def read_warmup_records(export_dir):
    """[(signature_name, {input: ndarray})] of `export_dir`'s warm-up file, parsed with TF Serving's protos."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from keras_transformer.export.warmup import WARMUP_PATH

    requests = []
    for record in tf.compat.v1.io.tf_record_iterator(os.path.join(export_dir, WARMUP_PATH)):
        log = prediction_log_pb2.PredictionLog.FromString(record)
        if log.WhichOneof("log_type") != "predict_log":
            raise ValueError(f"unexpected warm-up record type {log.WhichOneof('log_type')!r}")
        request = log.predict_log.request
        inputs = {key: tf.make_ndarray(value) for key, value in request.inputs.items()}
        requests.append((request.model_spec.signature_name, inputs))
    return requests


def mixed_requests(count, seed, min_rows=1, max_rows=64, min_words=3, max_words=100):
    """`count` requests of `min_rows`-`max_rows` sentences of `min_words`-`max_words` words (fixed seed)."""
    import numpy as np

    from keras_transformer.datasets.synthetic_en_de import make_splits

    random = np.random.default_rng(seed)
    pairs, _ = make_splits(2000, 1, seed=seed)
    words = " ".join(source for source, _ in pairs).split()
    requests = []
    for _ in range(count):
        rows = int(random.integers(min_rows, max_rows + 1))
        texts = []
        for _ in range(rows):
            length = int(random.integers(min_words, max_words + 1))
            start = int(random.integers(0, len(words) - length))
            texts.append(" ".join(words[start:start + length]).encode("utf-8"))
        requests.append(texts)
    return requests


def run_stream(export_dir, warm, count, seed):
    """One server process's life: load, optionally warm up, then the mixed stream."""
    import numpy as np

    start = time.perf_counter()
    server = SessionServer(export_dir)
    load_seconds = time.perf_counter() - start
    warmup = server.warm_up() if warm else []
    latencies, sentences = [], 0
    stream_start = time.perf_counter()
    for texts in mixed_requests(count, seed):
        start = time.perf_counter()
        outputs = server.predict("serving_default", {"text": texts})
        latencies.append(time.perf_counter() - start)
        assert len(outputs["translations"]) == len(texts)
        sentences += len(texts)
    elapsed = time.perf_counter() - stream_start
    server.close()
    return {
        "load_s": load_seconds,
        "warmup_s": sum(seconds for _, seconds in warmup),
        "warmup_records": len(warmup),
        "latencies_s": latencies,
        "rows": [len(texts) for texts in mixed_requests(count, seed)],
        "sentences": sentences,
        "stream_s": elapsed,
        "p50_s": float(np.percentile(latencies, 50)),
        "p99_s": float(np.percentile(latencies, 99)),
        "max_s": max(latencies),
        "sentences_per_s": sentences / elapsed,
    }


def table_parts(record):
    """(what, header, rows) of a record's table in benchmarks/README.md (`table:serve-mix`)."""
    workload = record["workload"]
    what = (f"{workload['preset']} preset, random weights, beam {workload['beam_size']}, {workload['requests']} "
            f"requests of 1 to 64 sentences, input limit {workload['max_input_length']} tokens, seed "
            f"{workload['seed']}; each variant and start in its own process")
    rows = []
    for name, run in record["runs"].items():
        variant, start = name.split("/")
        warmup = f"{run['warmup_records']} records, {run['warmup_s']:.0f} s" if run["warmup_records"] else "none"
        rows.append([variant, start, warmup, f"{run['p50_s']:.2f}", f"{run['p99_s']:.2f}",
                     f"{run['p99_s'] / run['p50_s']:.1f}x", f"{run['max_s']:.2f}", f"{run['sentences_per_s']:.1f}"])
    header = ["variant", "start", "warm-up", "p50 s", "p99 s", "p99 / p50", "max s", "sentences/s"]
    return what, header, rows


def parse_args(argv=None):
    parser = _harness.workload_options(_harness.parser(__doc__, "serve_mix"), preset="tiny", vocabulary_size=8000,
                                       beam_size=4)
    parser.add_argument("--requests", type=_harness.positive(int), default=40, help="requests in the mixed stream")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-rows", type=int, default=64, help="rows of the largest warmed-up request")
    parser.add_argument("--max-input-length", type=int, default=128, help="export's input limit (tokens)")
    parser.add_argument("--max-extra-length", type=int, default=10,
                        help="tokens a translation may add to its source's length")
    parser.add_argument("--variants", type=_harness.comma_list(VARIANTS), default="plain,xla")
    parser.add_argument("--starts", type=_harness.comma_list(("cold", "warm", "restart")), default="cold,warm",
                        help="cold (no warm-up), warm (records replayed first), restart (warm again, after a warm "
                             "start, on the persistent XLA cache that start filled: TF_XLA_FLAGS, docs/serving.md)")
    parser.add_argument("--export-base", help="where to export (default: a temporary directory)")
    # Internal: one (variant, start) in a child process.
    parser.add_argument("--child", nargs=3, metavar=("EXPORT_DIR", "WARM", "RESULT"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def export_variants(args, base):
    """The preset's model (random weights) and a tokenizer, exported as each variant."""
    from benchmarks import serve
    from keras_transformer.export import export_saved_model

    tokenizer, _ = serve.tokenizer_for(args.vocabulary_size)
    # Random weights with EOS never chosen: every translation runs to its limit.
    model = serve.make_model(tokenizer.vocabulary_size, args.preset)
    directories = {}
    for variant in args.variants:
        directories[variant] = export_saved_model(
            model, tokenizer, os.path.join(base, variant), beam_size=args.beam_size,
            max_extra_length=args.max_extra_length, max_input_length=args.max_input_length,
            jit_compile=variant == "xla", warmup_rows=args.warmup_rows, check_ops=False,
        )
    return directories, {"preset": args.preset, "vocabulary": tokenizer.vocabulary_size}


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        export_dir, warm, result_path = args.child
        result = run_stream(export_dir, warm in ("warm", "restart"), args.requests, args.seed)
        with open(result_path, "w") as stream:
            json.dump(result, stream)
        return 0

    record = _harness.start("serve_mix", argv, packages=("tensorflow", "keras", "tensorflow-serving-api"))
    base = args.export_base or tempfile.mkdtemp(prefix="serve-mix-")
    directories, model_config = export_variants(args, base)
    starts = args.starts
    if "restart" in starts and ("warm" not in starts or starts.index("restart") < starts.index("warm")):
        raise SystemExit("--starts: restart reads the XLA cache a warm start fills: give warm before it")
    runs = {}
    for variant, export_dir in directories.items():
        environment = dict(os.environ)
        if "restart" in args.starts:  # the warm start fills a fresh cache, the restart reads it
            cache = tempfile.mkdtemp(prefix=f"xla-cache-{variant}-", dir=base)
            environment["TF_XLA_FLAGS"] = f"--tf_xla_persistent_cache_directory={cache}"
        for start in args.starts:
            result_path = os.path.join(base, f"{variant}-{start}.json")
            command = [sys.executable, os.path.abspath(__file__), "--requests", str(args.requests),
                       "--seed", str(args.seed), "--child", export_dir, start, result_path]
            subprocess.run(command, check=True, env=environment)
            with open(result_path) as stream:
                runs[f"{variant}/{start}"] = json.load(stream)
            result = runs[f"{variant}/{start}"]
            print(f"{variant:5s} {start:4s}: warm-up {result['warmup_s']:7.1f} s ({result['warmup_records']} "
                  f"records), p50 {result['p50_s']:6.2f} s, p99 {result['p99_s']:6.2f} s, "
                  f"max {result['max_s']:6.2f} s, {result['sentences_per_s']:6.1f} sent/s", flush=True)
    record["workload"] = {**model_config, **{key: value for key, value in vars(args).items()
                                             if key not in ("child", "record", "export_base")}}
    record["runs"] = runs
    _harness.finish(record)
    _harness.save(args.record, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
