"""Record keeping shared by every benchmark: one JSON line per run.

A record says what ran (the exact command, the commit with a "-dirty" flag
when tracked files differed from it, library versions), where (CPU model,
CPU count, node, platform, GPU names when there is one), under what load
(load average before and after) and when (UTC), next to the raw timings the
benchmark adds itself. `benchmarks/report.py` regenerates the tables and
charts of the documentation from these lines, so a figure quoted there can
be traced to its record and re-run with its command.

Standard library only: the report and its test import this module without
TensorFlow.
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
