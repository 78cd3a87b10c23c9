"""What every benchmark script shares: records (what ran, where, under what load, when: docs/benchmarks.md),
options, and timing contenders in turns. The workloads, the contenders' shape and the model sizes are in
_workloads.py.
Standard library only at import: report.py and its tests import this module without Keras or numpy.
"""

import argparse
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


def parser(doc, record=None, aliases=()):
    """The argument parser every benchmark script starts from: `doc` (its module docstring) as its
    description, and `--record` (or its older spellings, `aliases`), the JSON-lines file the run's
    record is appended to (default results/<record>.jsonl; None: the script picks one)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = default_path(record) if record else None
    shown = os.path.relpath(default, ROOT) if default else "the benchmark's file in benchmarks/results"
    parser.add_argument("--record", *aliases, default=default,
                        help=f"JSON-lines file the run's record is appended to (default: {shown}; '' for none)")
    return parser


def positive(kind):
    """An argparse type: a number of `kind` (int, float) above 0."""
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text}: must be above 0")
        return value
    return parse


def comma_list(choices):
    """An argparse type: a comma-separated list of some of `choices`."""
    def parse(text):
        items = text.split(",")
        if not text or set(items) - set(choices):
            raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list of {','.join(choices)}")
        return items
    return parse


# The decoding benchmarks' workload options, with what each means.
WORKLOAD_OPTIONS = {"preset": "model size: tiny, or the paper's base and big", "beam_size": "beam width",
                    "vocabulary_size": "vocabulary pieces", "batch_size": "sources per call",
                    "source_tokens": "tokens per source, EOS included", "steps": "generated tokens per sentence",
                    "rounds": "timed rounds"}


def workload_options(parser, **defaults):
    """Adds --preset, --vocabulary-size, ... (WORKLOAD_OPTIONS' keys given in `defaults`) to `parser`."""
    for key, default in defaults.items():
        choices = ("tiny", "base", "big") if key == "preset" else None
        kind = str if key == "preset" else positive(type(default))
        parser.add_argument("--" + key.replace("_", "-"), type=kind, default=default, choices=choices,
                            help=f"{WORKLOAD_OPTIONS[key]} (default %(default)s)")
    return parser


def cpuinfo(field):
    """The first `field` line's value in /proc/cpuinfo (Linux); None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    return cpuinfo("model name") or platform.processor() or platform.machine()


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
    try:
        if "jax" in sys.modules:
            return [device.device_kind for device in sys.modules["jax"].devices() if device.platform == "gpu"]
        if "tensorflow" in sys.modules:
            tf = sys.modules["tensorflow"]
            return [tf.config.experimental.get_device_details(device).get("device_name", device.name)
                    for device in tf.config.list_physical_devices("GPU")]
    except Exception:  # noqa: BLE001 (no backend initialised: nothing to report)
        pass
    return []


def machine():
    """The machine a run measured: CPU model and count, node, platform, Python, GPUs."""
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "node": platform.node(),
            "platform": platform.platform(), "python": platform.python_version(), "gpus": gpus()}


# CPU flags that decide which matrix kernels run (Linux /proc/cpuinfo names).
MATRIX_FLAG_PREFIXES = ("avx", "fma", "f16c", "amx")


def cpu_flags():
    """The CPU's flags that matter to matrix libraries (AVX*, FMA, F16C, AVX-512*, VNNI, AMX*); [] if unknown."""
    flags = (cpuinfo("flags") or "").split()
    return sorted(flag for flag in flags if flag.startswith(MATRIX_FLAG_PREFIXES) or "vnni" in flag)


# CTranslate2 logs its CPU backend when it loads a model: a child process builds a one-layer encoder of
# d_model 8 (its spec API, no Keras: fast) and loads it with CT2_VERBOSE=1.
_CT2_PROBE = r"""
import sys, tempfile
import numpy as np
import ctranslate2
from ctranslate2.specs import transformer_spec

d, rng = 8, np.random.default_rng(0)
def linear(spec, outputs):
    spec.weight, spec.bias = rng.standard_normal((outputs, d), dtype="float32"), np.zeros(outputs, "float32")
def norm(spec):
    spec.gamma, spec.beta = np.ones(d, "float32"), np.zeros(d, "float32")
encoder = transformer_spec.TransformerEncoderSpec(1, 1)
encoder.embeddings[0].weight = rng.standard_normal((8, d), dtype="float32")
encoder.position_encodings.encodings = rng.standard_normal((16, d), dtype="float32")
layer = encoder.layer[0]
linear(layer.self_attention.linear[0], 3 * d)
linear(layer.self_attention.linear[1], d)
linear(layer.ffn.linear_0, d)
linear(layer.ffn.linear_1, d)
for spec in (layer.self_attention.layer_norm, layer.ffn.layer_norm, encoder.layer_norm):
    norm(spec)
spec = transformer_spec.TransformerEncoderModelSpec(encoder)
spec.register_vocabulary(["<blank>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4)])
spec.validate()
spec.optimize(quantization=sys.argv[1])
with tempfile.TemporaryDirectory() as directory:
    spec.save(directory)
    ctranslate2.Encoder(directory, device="cpu", compute_type=sys.argv[1])
"""


def parse_ctranslate2_log(text):
    """CTranslate2's CT2_VERBOSE=1 `[info]` lines as {key: value} ("Selected ISA", "SGEMM backend", ...)."""
    found = {}
    for line in text.splitlines():
        if "[info]" not in line:
            continue
        message = line.split("[info]", 1)[1].strip().lstrip("- ").strip()
        if ":" in message and not message.startswith("Loaded model"):
            key, value = message.split(":", 1)
            found.setdefault(key.strip(), value.strip())
    return found


def probe(package, code, *args, **environment):
    """({"version": `package`'s}, the completed child Python that ran `code` with `args`, `environment` added to
    this one's); (None, None) without the package, (info with "error", None) when the child could not run."""
    version = versions(package).get(package)
    if version is None:
        return None, None
    try:
        return {"version": version}, subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                                                    text=True, timeout=120, env=dict(os.environ, **environment))
    except (OSError, subprocess.SubprocessError) as error:
        return {"version": version, "error": str(error)}, None


def ctranslate2_backend(quantization="int8"):
    """What CTranslate2 runs on this CPU (its log when loading a model), with "version"; None without it."""
    info, completed = probe("ctranslate2", _CT2_PROBE, quantization, CT2_VERBOSE="1")
    if completed is None:
        return info
    found = parse_ctranslate2_log(completed.stdout + completed.stderr)
    if completed.returncode != 0 or not found:
        return {**info, "error": (completed.stderr or completed.stdout)[-500:]}
    return {**info, **found}


def tensorflow_onednn():
    """TensorFlow's oneDNN use: TF_ENABLE_ONEDNN_OPTS, and what a child TensorFlow logs and reports
    (`IsMklEnabled`); None when TensorFlow is not installed."""
    code = "from tensorflow.python.util import _pywrap_util_port as u; print('is_mkl_enabled', u.IsMklEnabled())"
    info, completed = probe("tensorflow", code, TF_CPP_MIN_LOG_LEVEL="0")
    if info is None:
        return None
    info["TF_ENABLE_ONEDNN_OPTS"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if completed is not None:
        log = completed.stdout + completed.stderr
        info["onednn_custom_ops_logged_on"] = "oneDNN custom operations are on" in log
        info["is_mkl_enabled"] = "is_mkl_enabled True" in log
    return info


def matrix_libraries():
    """The matrix libraries a CPU figure depends on: CPU model and flags, CTranslate2's backend, TensorFlow's oneDNN."""
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


COMMAND_VARIABLES = ("KERAS_BACKEND", "TF_ENABLE_ONEDNN_OPTS")


def command_line(argv=None, script=None):
    """The command that reproduces this run, from the repository root, with the variables of
    COMMAND_VARIABLES that are set (the backend; TensorFlow's oneDNN switch, which moves CPU figures)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    script = os.path.abspath(script or sys.argv[0])
    python = sys.executable
    if python.startswith(str(ROOT) + os.sep):
        python = os.path.relpath(python, ROOT)
    elif shutil.which("python") and os.path.realpath(shutil.which("python")) == os.path.realpath(python):
        python = "python"
    prefix = "".join(f"{name}={os.environ[name]} " for name in COMMAND_VARIABLES if os.environ.get(name))
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
    """Adds the load after the run to `record` and prints the machine, the load, the commit and the matrix
    libraries."""
    record["load_average"]["after"] = load = load_average()
    before, libraries = record["load_average"]["before"], record["libraries"]
    ct2 = libraries.get("ctranslate2") or {}
    print(f"# {record['machine']['cpu']}, {record['machine']['cpus']} CPUs, load average "
          + (f"{before[0]:.1f} before, {load[0]:.1f} after" if before and load else "unknown")
          + f"; commit {record['commit']}\n# CPU flags: {' '.join(libraries['cpu_flags'])}; CTranslate2: SGEMM "
          f"{ct2.get('SGEMM backend', '-')}, int8 GEMM {ct2.get('GEMM_S8 backend', '-')}, MKL "
          f"{ct2.get('Use Intel MKL', '-')}, ISA {ct2.get('Selected ISA', '-')}; TensorFlow oneDNN "
          f"{(libraries.get('tensorflow_onednn') or {}).get('is_mkl_enabled', '-')}", flush=True)
    return record


def save(path, record):
    """Appends `record` to the JSON-lines file `path` (folders created) and prints where, relative to the
    repository root when inside it; does nothing for an empty path (a script's `--record ''`). Returns the
    path or None."""
    if not path:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    shown = os.path.relpath(path, ROOT) if path.resolve().is_relative_to(ROOT) else str(path)
    print(f"# record appended to {shown}", flush=True)
    return path


def markdown_table(header, rows, align=None):
    """A Markdown table of string cells (`align`: the separator row's cells, "---" each by default)."""
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


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

# ------------------------------------------------------------ timing
# Contenders timed in turns, and the workers that run one each.


def timings(call, rounds):
    """Seconds of each of `rounds` calls of `call` (warm it up first)."""
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return seconds


def generated_lengths(output, eos=3, pad=0):
    """Tokens of each row of a search's output up to its first EOS, pad left out: (rows, width) ids, or
    rows of pieces without EOS (CTranslate2's hypotheses)."""
    if not hasattr(output, "tolist"):
        return [len(row) for row in output]
    lengths = []
    for row in output.tolist():
        end = row.index(eos) if eos in row else len(row)
        lengths.append(sum(1 for token in row[:end] if token != pad))
    return lengths


def take_turns(calls, rounds, steps):
    """({name: [seconds per round]}, {name: [CPU seconds per round]}) of `calls` taking turns, round after
    round, each first called once to warm up (trace, compile) and to check that it generates exactly `steps`
    tokens a row (None: any). CPU seconds (this process's threads) are the work done, which load inflates less."""
    for name, call in calls.items():
        found = call() if steps is None else sorted(set(generated_lengths(call())))
        if steps is not None and found != [steps]:
            raise SystemExit(f"{name} generated {found} tokens, not {steps}: unequal work")
    names, seconds, cpu_seconds = list(calls), {name: [] for name in calls}, {name: [] for name in calls}
    for index in range(rounds):
        for name in names[index % len(names):] + names[:index % len(names)]:
            start, cpu = time.perf_counter(), time.process_time()
            calls[name]()
            seconds[name].append(time.perf_counter() - start)
            cpu_seconds[name].append(time.process_time() - cpu)
    return seconds, cpu_seconds


def worker_result(command, timeout=None, **options):
    """Runs a benchmark's worker process (`subprocess.run` options) and returns the JSON of its last
    "RESULT {...}" line, else {"error": why} (its output's tail printed)."""
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **options)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout} s"}
    lines = [line for line in output.stdout.splitlines() if line.startswith("RESULT ")]
    if lines:
        return json.loads(lines[-1][len("RESULT "):])
    print(output.stdout[-2000:], output.stderr[-4000:], file=sys.stderr)
    return {"error": output.stderr.strip().splitlines()[-1] if output.stderr.strip() else "no result"}
