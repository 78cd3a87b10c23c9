"""keras_transformer.export.cpu_notes: what an export says about serving on a CPU like this one.

The oneDNN switch is checked against TensorFlow itself, in child processes (TensorFlow reads the variable
once, when it loads): the variable docs/serving.md gives the server turns TensorFlow's oneDNN kernels on,
and off, on whatever CPU runs the suite."""

import os
import subprocess
import sys

import pytest

from keras_transformer.export import cpu_notes


def uses_onednn_in_a_child(value):
    env = {**os.environ, cpu_notes.ONEDNN_VARIABLE: value, "TF_CPP_MIN_LOG_LEVEL": "3"}
    code = "from keras_transformer.export.cpu_notes import tensorflow_uses_onednn as f; print('onednn', f())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return [line for line in result.stdout.splitlines() if line.startswith("onednn ")] == ["onednn True"]


def test_the_documented_variable_switches_tensorflows_onednn_kernels():
    assert uses_onednn_in_a_child("1")
    assert not uses_onednn_in_a_child("0")


@pytest.mark.parametrize("bfloat16_units, onednn, variable, quantize, jit_compile, expected", [
    (False, False, None, "bfloat16", False, ["no bfloat16 units", "TF_ENABLE_ONEDNN_OPTS=1"]),
    (True, False, None, "bfloat16", False, ["TF_ENABLE_ONEDNN_OPTS=1"]),
    (False, True, None, "bfloat16", False, ["no bfloat16 units"]),
    (False, False, None, None, True, []),  # the XLA variant compiles its own kernels
    (False, False, "0", None, False, []),  # the user chose: no advice
    (False, False, None, "int8", False, ["TF_ENABLE_ONEDNN_OPTS=1"]),
    (True, True, None, None, False, []),
])
def test_notes_follow_the_cpu_and_the_export(monkeypatch, bfloat16_units, onednn, variable, quantize, jit_compile,
                                             expected):
    monkeypatch.setattr(cpu_notes, "cpu_has_bfloat16", lambda: bfloat16_units)
    monkeypatch.setattr(cpu_notes, "tensorflow_uses_onednn", lambda: onednn)
    if variable is None:
        monkeypatch.delenv(cpu_notes.ONEDNN_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(cpu_notes.ONEDNN_VARIABLE, variable)
    notes = cpu_notes.serving_cpu_notes(quantize, jit_compile)
    assert len(notes) == len(expected) and all(text in note for text, note in zip(expected, notes)), notes
