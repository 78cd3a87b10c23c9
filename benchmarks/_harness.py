"""What every benchmark script shares: records, the training workloads, the contenders' shape
(and ours), and what quality.py and its workers share.

Records: one JSON line per run says what ran (the exact command, the commit with a "-dirty" flag
when tracked files differed from it, library versions), where (CPU model, count and flags, node,
platform, GPU names, CTranslate2's and TensorFlow's matrix backends), under what load (load average
before and after) and when (UTC), next to the raw timings the benchmark adds itself.
`benchmarks/report.py` regenerates the tables and charts of the documentation from these lines,
so a figure quoted there can be traced to its record and re-run with its command.

Standard library only at import (Keras, TensorFlow and numpy are imported inside the functions that
need them): the report and its tests import this module without them.
"""

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def default_path(name):
    """benchmarks/results/<name>.jsonl: where a benchmark's records go unless told otherwise."""
    return str(RESULTS / f"{name}.jsonl")


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus():
    """Names of the GPUs of this machine: `nvidia-smi -L`, else an already imported framework's; [] when none."""
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
        names = [line.split(":", 1)[1].split("(UUID")[0].strip() for line in listing.splitlines()
                 if line.startswith("GPU ") and ":" in line]
        if names:
            return names
    # Only frameworks the benchmark imported already: importing one here would
    # cost seconds and, for TensorFlow, claim the GPU's memory.
    if "jax" in sys.modules:
        try:
            return [device.device_kind for device in sys.modules["jax"].devices() if device.platform == "gpu"]
        except Exception:  # noqa: BLE001 (no backend initialised: nothing to report)
            return []
    if "tensorflow" in sys.modules:
        try:
            tf = sys.modules["tensorflow"]
            return [tf.config.experimental.get_device_details(device).get("device_name", device.name)
                    for device in tf.config.list_physical_devices("GPU")]
        except Exception:  # noqa: BLE001
            return []
    return []


def machine():
    """The machine a run measured: CPU model and count, node, platform, Python, GPUs."""
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "node": platform.node(),
            "platform": platform.platform(), "python": platform.python_version(), "gpus": gpus()}


# CPU flags that decide which matrix kernels run (Linux /proc/cpuinfo names).
MATRIX_FLAG_PREFIXES = ("avx", "fma", "f16c", "amx")


def cpu_flags():
    """The CPU's flags that matter to matrix libraries (AVX*, FMA, F16C, AVX-512*, VNNI, AMX*); [] if unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return sorted(flag for flag in flags if flag.startswith(MATRIX_FLAG_PREFIXES) or "vnni" in flag)
    except OSError:
        pass
    return []


# A CTranslate2 model of one layer each side, d_model 8, built with its spec
# API in a child process that loads it with CT2_VERBOSE=1: the engine logs
# its CPU backend when it loads a model.
_CT2_PROBE = r"""
import sys, tempfile
import numpy as np
import ctranslate2
from ctranslate2.specs import transformer_spec

d, v, p = 8, 8, 16
rng = np.random.default_rng(0)
w = lambda *shape: rng.standard_normal(shape).astype("float32")
spec = transformer_spec.TransformerSpec.from_config((1, 1), 1, pre_norm=False)
def linear(s, out, inp):
    s.weight, s.bias = w(out, inp), w(out)
def norm(s):
    s.gamma, s.beta = np.ones(d, "float32"), np.zeros(d, "float32")
def ffn(s):
    linear(s.linear_0, d, d); linear(s.linear_1, d, d); norm(s.layer_norm)
enc, dec = spec.encoder, spec.decoder
enc.embeddings[0].weight = w(v, d)
enc.position_encodings.encodings = w(p, d)
layer = enc.layer[0]
linear(layer.self_attention.linear[0], 3 * d, d); linear(layer.self_attention.linear[1], d, d)
norm(layer.self_attention.layer_norm); ffn(layer.ffn)
dec.embeddings.weight = w(v, d)
dec.position_encodings.encodings = w(p, d)
dec.projection.weight = dec.embeddings.weight
layer = dec.layer[0]
linear(layer.self_attention.linear[0], 3 * d, d); linear(layer.self_attention.linear[1], d, d)
norm(layer.self_attention.layer_norm)
linear(layer.attention.linear[0], d, d); linear(layer.attention.linear[1], 2 * d, d)
linear(layer.attention.linear[2], d, d); norm(layer.attention.layer_norm); ffn(layer.ffn)
words = ["<blank>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(v - 4)]
spec.register_source_vocabulary(words)
spec.register_target_vocabulary(words)
spec.validate()
spec.optimize(quantization=sys.argv[1])
with tempfile.TemporaryDirectory() as directory:
    spec.save(directory)
    ctranslate2.Translator(directory, device="cpu", compute_type=sys.argv[1])
"""


def parse_ctranslate2_log(text):
    """The `[info]` lines CTranslate2 prints with CT2_VERBOSE=1 as {key: value}
    ("CPU", "Selected ISA", "Use Intel MKL", "SGEMM backend", "GEMM_S8 backend", ...)."""
    found = {}
    for line in text.splitlines():
        if "[info]" not in line:
            continue
        message = line.split("[info]", 1)[1].strip().lstrip("- ").strip()
        if ":" in message and not message.startswith("Loaded model"):
            key, value = message.split(":", 1)
            found.setdefault(key.strip(), value.strip())
    return found


def ctranslate2_backend(python=None, quantization="int8"):
    """What CTranslate2 runs on this CPU (its CT2_VERBOSE=1 log when loading a
    model of `quantization` weights), with "version"; None when it is not installed."""
    try:
        version = importlib.metadata.version("ctranslate2")
    except importlib.metadata.PackageNotFoundError:
        return None
    environment = dict(os.environ, CT2_VERBOSE="1")
    try:
        completed = subprocess.run([python or sys.executable, "-c", _CT2_PROBE, quantization], env=environment,
                                   capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        return {"version": version, "error": str(error)}
    found = parse_ctranslate2_log(completed.stdout + completed.stderr)
    if completed.returncode != 0 or not found:
        return {"version": version, "error": (completed.stderr or completed.stdout)[-500:]}
    return {"version": version, **found}


_TF_PROBE = r"""
from tensorflow.python.util import _pywrap_util_port
print("is_mkl_enabled", bool(_pywrap_util_port.IsMklEnabled()))
"""


def tensorflow_onednn(python=None):
    """TensorFlow's oneDNN use: TF_ENABLE_ONEDNN_OPTS as set, and what a child
    TensorFlow with this environment logs ("oneDNN custom operations are
    on") and reports (`IsMklEnabled`); None when TensorFlow is not installed."""
    try:
        version = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        return None
    info = {"version": version, "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS")}
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    try:
        completed = subprocess.run([python or sys.executable, "-c", _TF_PROBE], env=environment,
                                   capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        return {**info, "error": str(error)}
    log = completed.stdout + completed.stderr
    info["onednn_custom_ops_logged_on"] = "oneDNN custom operations are on" in log
    info["is_mkl_enabled"] = "is_mkl_enabled True" in log
    return info


def matrix_libraries():
    """The matrix libraries a CPU figure depends on: CPU model and flags,
    CTranslate2's backend, TensorFlow's oneDNN use."""
    return {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "ctranslate2": ctranslate2_backend(),
            "tensorflow_onednn": tensorflow_onednn()}


def load_average():
    """The 1, 5 and 15-minute load averages, rounded to hundredths (None where the OS has none)."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def commit(root=ROOT):
    """The checkout's short HEAD, with "-dirty" when tracked files differ from it; None outside git."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if changed else "")


def command_line(argv=None, script=None):
    """The command that reproduces this run, from the repository root, with KERAS_BACKEND when it is set."""
    argv = sys.argv[1:] if argv is None else list(argv)
    script = os.path.abspath(script or sys.argv[0])
    python = sys.executable
    if python.startswith(str(ROOT) + os.sep):
        python = os.path.relpath(python, ROOT)
    elif shutil.which("python") and os.path.realpath(shutil.which("python")) == os.path.realpath(python):
        python = "python"
    backend = os.environ.get("KERAS_BACKEND")
    prefix = f"KERAS_BACKEND={backend} " if backend else ""
    return prefix + shlex.join([python, os.path.relpath(script, ROOT), *argv])


def versions(*packages):
    """Installed versions of `packages` (distribution names); those not installed are left out."""
    found = {}
    for name in packages:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def timestamp():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def start(benchmark, argv=None, script=None, packages=("tensorflow", "keras", "keras-hub", "jax", "torch")):
    """A new record with everything but the results; `finish` adds the load after the run."""
    return {"benchmark": benchmark, "time": timestamp(), "commit": commit(),
            "command": command_line(argv, script), "machine": machine(), "versions": versions(*packages),
            "libraries": matrix_libraries(), "load_average": {"before": load_average()}}


def finish(record):
    record["load_average"]["after"] = load_average()
    return record


def append(path, record):
    """Appends `record` to the JSON-lines file `path` (folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def save(path, record):
    """Appends `record` to `path` (see `append`) and prints where, relative to the repository root
    when inside it; does nothing for an empty path (a script's `--record ''`). Returns the path or None."""
    if not path:
        return None
    path = append(path, record)
    shown = os.path.relpath(path, ROOT) if path.resolve().is_relative_to(ROOT) else str(path)
    print(f"# record appended to {shown}", flush=True)
    return path


def markdown_table(header, rows, align=None):
    """A Markdown table of string cells (`align`: the separator row's cells, "---" each by default)."""
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def print_table(record, table_parts):
    """Prints a finished record's table (`table_parts(record)`: what, header, rows) and its commit and load."""
    what, header, rows, *_ = table_parts(record)
    print(f"\n{what}\n\n{markdown_table(header, rows)}")
    load = record["load_average"]
    print(f"# commit {record['commit']}, load {load['before'][0]:.1f} before, {load['after'][0]:.1f} after")


def read(path):
    """The records of a JSON-lines file; a line that is not JSON is an error naming the file and line."""
    records = []
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: not a JSON record ({error})") from None
    return records

# ------------------------------------------------------------ training workloads
# The batches every throughput contender trains on (train_throughput.py): SIZE is the model every
# contender builds, `load_batches` gives the fixed-shape random batches or the real-text ones,
# `cycled_dataset` and `warmed_up` feed them to a compiled Keras model, and `timed_fit` is the Keras
# contenders' `train_steps`.

SIZE = dict(vocab=8000, d_model=256, layers=3, heads=4, d_ff=1024, dropout=0.1)
BATCH, LENGTH = 64, 32
NUM_BATCHES = 16  # distinct batches, cycled
CORPORA = ("ddtp_en_de.jsonl.gz", "po_all.jsonl.gz")  # under --data-dir: the real-text workload, quality.py's
REAL_TOKENS_PER_BATCH = 2048
REAL_NUM_BATCHES = 24
MAX_LENGTH = 128  # tokens per side in training, EOS/BOS included; longer test sources are cut
SOURCE_KEY, TARGET_KEY = "en", "de"
MAX_CHARS = 600  # as recipes/parallel_text: drops the few paragraph-long DDTP pairs
PAD, BOS, EOS = 0, 2, 3


def read_pairs(path):
    """The (source, target) pairs of a corpus file, filtered as every benchmark filters them."""
    from keras_transformer.data import load_corpus

    pairs, _ = load_corpus(str(path), source_key=SOURCE_KEY, target_key=TARGET_KEY, max_chars=MAX_CHARS)
    return pairs


def make_batches(seed=0):
    """The synthetic workload: a list of (source, target_in, labels) int32 arrays."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # Ids 4.. are ordinary tokens (0 pad, 1 unk, 2 bos, 3 eos).
    source = rng.integers(4, SIZE["vocab"], size=(NUM_BATCHES, BATCH, LENGTH), dtype="int32")
    target = rng.integers(4, SIZE["vocab"], size=(NUM_BATCHES, BATCH, LENGTH + 1), dtype="int32")
    target[:, :, 0] = BOS
    return [(source[i], target[i, :, :-1], target[i, :, 1:]) for i in range(NUM_BATCHES)]


def make_real_batches(data_dir, work, bucket_width):
    """The real-text workload (see the module docstring), cached in `work`."""
    import numpy as np

    cache = work / f"batches_width{bucket_width}.npz"
    if cache.exists():
        arrays = np.load(cache)
        return [tuple(arrays[f"{name}{i}"] for name in ("source", "target", "labels"))
                for i in range(len(arrays.files) // 3)]
    paths = [Path(data_dir) / name for name in CORPORA]
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise SystemExit(f"--workload real: {', '.join(missing)} not found (set --data-dir)")
    from keras_transformer.data import SubwordTokenizer, default_bucket_boundaries, make_dataset

    pairs = [pair for path in paths for pair in read_pairs(path)]
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = SubwordTokenizer.train(pairs, vocabulary_size=SIZE["vocab"], model_type="unigram", seed=0)
    if tokenizer.vocabulary_size != SIZE["vocab"] or (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) != (
            PAD, BOS, EOS):
        raise SystemExit("--workload real: the tokenizer's vocabulary or special ids differ from the benchmark's")
    dataset = make_dataset(
        pairs, tokenizer, tokens_per_batch=REAL_TOKENS_PER_BATCH, max_length=MAX_LENGTH,
        bucket_boundaries=default_bucket_boundaries(
            MAX_LENGTH, min_boundary=bucket_width, growth=1, multiple=bucket_width),
        training=True, seed=0, cache=False,
    )
    batches = []
    for inputs, labels in dataset.take(REAL_NUM_BATCHES):
        batches.append((inputs["source"].numpy(), inputs["target"].numpy(), labels.numpy()))
    np.savez(cache, **{f"{name}{i}": array for i, batch in enumerate(batches)
                       for name, array in zip(("source", "target", "labels"), batch)})
    return batches


def load_batches(workload, data_dir, work_dir, bucket_width=1):
    """The batches of `workload` ("synthetic" or "real")."""
    if workload == "real":
        return make_real_batches(data_dir, Path(work_dir), bucket_width)
    return make_batches()


def cycled_dataset(batches):
    """The batches as a tf.data pipeline that cycles them, one element per batch (shapes may differ)."""
    import functools

    import tensorflow as tf

    elements = [tf.data.Dataset.from_tensors(({"source": s, "target": t}, y)) for s, t, y in batches]
    return functools.reduce(lambda a, b: a.concatenate(b), elements).repeat().prefetch(4)


def warmed_up(model, dataset, steps):
    """An iterator over `dataset` after `steps` untimed steps of the compiled `model`'s train function
    (the first through `fit`, which builds the optimizer)."""
    model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
    iterator = iter(dataset)
    for _ in range(steps):
        model.train_function(iterator)
    return iterator


def target_tokens(batches):
    """Non-pad target tokens of each batch."""
    return [int((labels != PAD).sum()) for _, _, labels in batches]


def peak_memory_mb():
    """Peak resident memory of this process in MB.

    Not ru_maxrss: Linux hands a parent's on to the children it starts (fork,
    then exec), so every contender would report at least this script's own
    peak. VmHWM belongs to the process's address space, which exec replaces.
    (Also run inside OpenNMT-tf's process: self-contained.)
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_fit(model, batches, steps, warmup):
    """Runs model.fit over the cycled batches; returns seconds for the timed steps."""
    import keras

    dataset = cycled_dataset(batches)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == warmup - 1:
                self.start = time.perf_counter()

        def on_train_end(self, logs=None):
            self.end = time.perf_counter()

    clock = Clock()
    model.fit(dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[clock])
    return clock.end - clock.start

# ------------------------------------------------------------ contenders
# The shape every contender has (train_throughput.py, quality.py), and ours; the peers' harnesses
# are _contender_keras_hub.py, _contender_torch.py and _contender_opennmt.py.

SEARCH = {"beam_size": 4, "alpha": 0.6, "max_extra_length": 50, "batch_size": 64, "max_source_length": MAX_LENGTH}


class Contender:
    """The one shape of a benchmark contender: a harness around one implementation of the Transformer.
    The scripts ask it for these and nothing else:

    - `build(size, policy=None)`: a model of `size` (a dict: vocab, d_model, layers, heads, d_ff,
      dropout; the throughput scripts pass `SIZE`) ready to train: compiled with its loss and
      optimizer (ours: `LabelSmoothedCrossEntropy(0.1)` and `paper_optimizer`, unless the contender
      is labelled otherwise). `policy` is a Keras dtype policy ("mixed_bfloat16"), or None for float32.
    - `train_steps(model, batches, steps, warmup)`: `warmup` untimed steps, then `steps` timed ones
      over the cycled `batches` ((source, target_in, labels) arrays); returns {"seconds", "steps",
      "target_tokens"} of the timed steps (train_throughput.py).
    - `train_for(model, dataset, minutes)`: trains on a repeating tf.data pipeline until the first
      step that ends past `minutes`; returns the `Clock` (steps, seconds) (quality.py).
    - `decode(model, tokenizer, sources, search)`: the contender's beam search on raw sentences;
      `search` is `SEARCH`, the same for every contender: beam 4, the GNMT length penalty
      ((5 + |Y|) / 6) ** 0.6 with |Y| counting EOS, at most (source tokens, EOS included) + 50
      output tokens per sentence, batches of 64 sentences sorted by length.

    `name`, `label` (what the row is, printed under tables and kept in records) and `backend` (the
    KERAS_BACKEND its process needs) describe it. Contenders that live in another process (OpenNMT-tf
    in its own virtual environment) keep the same verbs, carried out by a worker script.
    """
    name = ""
    label = ""
    backend = "tensorflow"

    def build(self, size, policy=None):
        raise NotImplementedError(f"{self.name}: no in-process model")

    def train_steps(self, model, batches, steps, warmup):
        """Keras contenders: `model.fit` over the cycled batches, timed from the end of the warm-up."""
        return timed_steps(timed_fit(model, batches, steps, warmup), batches, steps, warmup)

    def train_for(self, model, dataset, minutes):
        """Keras contenders: `model.fit` on `dataset` until the first step that ends past `minutes`."""
        import keras

        class TimeLimit(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.clock = Clock(minutes)  # constructed just before fit: the first step's tracing counts

            def on_train_batch_end(self, batch, logs=None):
                if self.clock.step(logs, batch):
                    self.model.stop_training = True

        limit = TimeLimit()
        # shuffle=False: the pipeline shuffles (Keras would only warn that it ignores this).
        model.fit(dataset, epochs=1, steps_per_epoch=10**8, callbacks=[limit], shuffle=False, verbose=0)
        return limit.clock

    def decode(self, model, tokenizer, sources, search=SEARCH):
        raise NotImplementedError(f"{self.name}: no decoding harness")


def timed_steps(seconds, batches, steps, warmup):
    """What `train_steps` returns: the timed steps' seconds and non-pad target tokens."""
    counts = target_tokens(batches)
    tokens = sum(counts[step % len(batches)] for step in range(warmup, warmup + steps))
    return {"seconds": seconds, "steps": steps, "target_tokens": tokens}


def set_policy(policy):
    """Sets the global Keras dtype policy before a model is built (None: leave float32)."""
    if policy and policy != "none":
        import keras

        keras.config.set_dtype_policy(policy)


def compile_ours(model, d_model, jit_compile="auto", optimizer=None):
    """Our loss and optimizer (`paper_optimizer` unless `optimizer` is given, as quality.py's settings
    do): what every contender labelled "our loss and paper_optimizer" trains with."""
    from keras_transformer.training import LabelSmoothedCrossEntropy, paper_optimizer

    model.compile(optimizer=optimizer or paper_optimizer(d_model), loss=LabelSmoothedCrossEntropy(0.1),
                  jit_compile=jit_compile)
    return model


class Ours(Contender):
    """Ours: `keras_transformer.Transformer` ("tiny" preset at the given size), our loss and
    `paper_optimizer`, and `decoding.Translator` (beam search with the GNMT length penalty, XLA)."""

    def __init__(self, name="ours-tf", label="ours, TensorFlow, plain graph", backend="tensorflow",
                 jit_compile=False, policy=None):
        self.name, self.label, self.backend = name, label, backend
        self.jit_compile, self.policy = jit_compile, policy

    def build(self, size, policy=None, optimizer=None):
        import keras_transformer as kt

        set_policy(policy or self.policy)
        model = kt.Transformer.from_preset(
            "tiny", vocabulary_size=size["vocab"], d_model=size["d_model"], num_heads=size["heads"],
            d_ff=size["d_ff"], num_encoder_layers=size["layers"], num_decoder_layers=size["layers"],
            dropout=size["dropout"],
        )
        return compile_ours(model, size["d_model"], jit_compile=self.jit_compile, optimizer=optimizer)

    def decode(self, model, tokenizer, sources, search=SEARCH):
        from keras_transformer.decoding import Translator

        translator = Translator(model, tokenizer, beam_size=search["beam_size"], alpha=search["alpha"],
                                max_extra_length=search["max_extra_length"],
                                max_source_length=search["max_source_length"], batch_size=search["batch_size"],
                                jit_compile=True)
        return translator.translate(sources)

    @staticmethod
    def search_description(search=SEARCH):
        return f"beam {search['beam_size']}, alpha {search['alpha']}, XLA"


THROUGHPUT = {
    "ours-tf": Ours(),
    "ours-tf-xla": Ours("ours-tf-xla", "ours, TensorFlow, XLA", jit_compile=True),
    "ours-jax": Ours("ours-jax", "ours, JAX (jit)", backend="jax", jit_compile=True),
    # Mixed precision (bfloat16 matmuls, float32 weights and loss): AMX/AVX512-BF16 CPUs run
    # bfloat16 matmuls ~2x faster. Same model, other numerics: compared with each other.
    "ours-tf-bf16": Ours("ours-tf-bf16", "ours, mixed_bfloat16, plain graph", policy="mixed_bfloat16"),
}

# ------------------------------------------------------------ time to quality
# What quality.py, its worker (_quality_worker.py) and the contenders share: the corpora (CORPORA),
# the model size and limits, reading the prepared pairs, the training clock and the trained-token count.

MODEL = dict(d_model=SIZE["d_model"], num_layers=SIZE["layers"], num_heads=SIZE["heads"], d_ff=SIZE["d_ff"],
             dropout=SIZE["dropout"])  # SIZE in the keys of the workers' configurations
SAVE_EVERY_STEPS = 500


def config():
    """The size and limits every contender's worker gets (OpenNMT-tf's as JSON)."""
    return {**MODEL, "max_length": MAX_LENGTH, "max_extra_length": SEARCH["max_extra_length"],
            "decode_batch": SEARCH["batch_size"], "save_every_steps": SAVE_EVERY_STEPS}


class Clock:
    """Training clock shared by our workers: started at construction, updated per step.

    Every `every` steps it prints the mean training loss of those steps
    (Keras' logs hold the running mean of the epoch so far; the interval mean
    is recovered from two of them).
    """

    def __init__(self, minutes, every=100):
        self.started = time.monotonic()
        self.deadline = self.started + 60 * minutes
        self.ended = self.started
        self.steps = 0
        self.every = every
        self._sum = 0.0  # loss summed over the steps of the current epoch so far
        self._batch = -1  # index within the epoch of the last step seen
        self._mark = 0.0  # self._sum at the last report, minus the sums of finished epochs

    def step(self, logs=None, batch=None):
        self.steps += 1
        self.ended = time.monotonic()
        loss = (logs or {}).get("loss")
        if loss is not None:
            batch = self._batch + 1 if batch is None else batch
            if batch <= self._batch:  # a new epoch: its running mean restarted
                self._mark -= self._sum
                self._sum = 0.0
            self._sum = float(loss) * (batch + 1)
            self._batch = batch
        if self.steps % self.every == 0:
            text = ""
            if loss is not None:
                text = f", loss (mean of the last {self.every} steps) {(self._sum - self._mark) / self.every:.3f}"
                self._mark = self._sum
            print(f"step {self.steps}: {(self.ended - self.started) / 60:.1f} min{text}", flush=True)
        return self.ended > self.deadline

    @property
    def seconds(self):
        return self.ended - self.started


def count_trained_tokens(pairs, tokenizer, steps, tokens_per_batch, seed, bucket_boundaries=None):
    """Non-pad (source, target) tokens in the first `steps` batches of the training pipeline.

    `run.train.train` and the KerasHub worker read `make_dataset(..., repeat=True)`
    with a fixed seed, so a fresh pipeline with the same options replays the
    batches they trained on. Target tokens count the labels (EOS included).
    """
    import numpy as np

    from keras_transformer.data import make_dataset

    dataset = make_dataset(pairs, tokenizer, tokens_per_batch=tokens_per_batch, max_length=MAX_LENGTH,
                           bucket_boundaries=bucket_boundaries, training=True, seed=seed, repeat=True)
    source = target = 0
    for inputs, labels in dataset.take(steps).as_numpy_iterator():
        source += int(np.count_nonzero(inputs["source"]))
        target += int(np.count_nonzero(labels))
    return source, target
