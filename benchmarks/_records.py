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
            "load_average": {"before": load_average()}}


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
