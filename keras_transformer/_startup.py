"""What happens before Keras is imported: the console script's defaults, and a
TensorFlow import that honours TF_CPP_MIN_LOG_LEVEL.

The one place in the package that sets KERAS_BACKEND: `prepare()` runs first
in `keras_transformer/__init__.py`, before the package imports Keras, and
defaults the backend to TensorFlow for the command line only (a library
user's backend, from the environment or ~/.keras/keras.json, is left alone).
A stand-alone script that needs TensorFlow (the recipes' and benchmarks'
`run.py`-style scripts, the multi-host example of docs/distributed.md) sets
`os.environ.setdefault("KERAS_BACKEND", "tensorflow")` in its own first
lines, as Keras documents: Python imports this package, and with it Keras,
before any function here could be called from such a script.
How the package keeps TensorFlow out of backend-agnostic modules is said in
`keras_transformer._tensorflow`.
"""

import os
import re
import sys
import tempfile

# TensorFlow 2.21 prints INFO lines (oneDNN, CUDA drivers, CPU features) while
# its libraries load, before absl logging is set up, so TF_CPP_MIN_LOG_LEVEL
# does not silence them.
_STARTUP_NOISE = re.compile(
    rb"^(I\d{4} [\d:.]+ +\d+ (port|cudart_stub|cpu_feature_guard)\.cc:\d+\]"
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|To enable the following instructions: .*rebuild TensorFlow)"
)


# On a machine without an NVIDIA driver, TensorFlow's first look for GPUs logs
# "failed call to cuInit: ... UNKNOWN ERROR (303)" at ERROR level: not an
# error there (no GPU can exist), so it is dropped, and only there.
_NO_DRIVER_NOISE = re.compile(rb"^E\d{4} [\d:.]+ +\d+ cuda_platform\.cc:\d+\] failed call to cuInit")


def _no_nvidia_driver():
    return not any(os.path.exists(path) for path in ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia"))


def _running_the_command_line():
    """The console script, or `python -m keras_transformer.cli`."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == "keras-transformer":
        return True
    arguments = list(getattr(sys, "orig_argv", []))
    return any(a == "-m" and b == "keras_transformer.cli" for a, b in zip(arguments, arguments[1:]))


def wants_verbose(argv=None):
    """Whether the command line asked for TensorFlow's log lines (`--verbose`
    anywhere among its arguments; read before argparse runs, since the log
    level must be set before TensorFlow loads)."""
    return "--verbose" in (sys.argv[1:] if argv is None else argv)


def prepare():
    """Called first by the package: sets the console script's defaults, then
    imports TensorFlow quietly if it will be the Keras backend."""
    if _running_the_command_line():
        # The command line needs TensorFlow (tf.data, tokenizer, export) and
        # shows none of its C++ log lines (INFO, WARNING, ERROR: "E0000 ...
        # oneDNN supports DT_INT64 only on platforms with AVX-512" on some
        # CPUs) unless the user sets TF_CPP_MIN_LOG_LEVEL or passes --verbose.
        # Errors that stop a command still reach the user as Python exceptions.
        os.environ.setdefault("KERAS_BACKEND", "tensorflow")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if wants_verbose() else "3")
    if "keras" not in sys.modules and os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
        import_tensorflow_quietly()


def import_tensorflow_quietly():
    """Imports TensorFlow, dropping its start-up INFO lines (and passing on all
    other output of the import) unless TF_CPP_MIN_LOG_LEVEL is unset or 0."""
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") in ("", "0"):
        return
    try:
        stderr_fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (some notebooks): nothing to filter
        return
    sys.stderr.flush()
    saved = os.dup(stderr_fd)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), stderr_fd)
        no_driver = _no_nvidia_driver()
        try:
            import tensorflow

            if no_driver:
                # Looks for GPUs now, while stderr is filtered (it would anyway,
                # at the first op); devices are not initialised by this.
                tensorflow.config.list_physical_devices("GPU")
        except ImportError:  # Keras will say what is missing, if it needs it
            pass
        finally:
            os.dup2(saved, stderr_fd)
            os.close(saved)
            captured.seek(0)
            kept = b"".join(
                line for line in captured
                if not _STARTUP_NOISE.match(line) and not (no_driver and _NO_DRIVER_NOISE.match(line))
            )
            if kept:
                os.write(stderr_fd, kept)
