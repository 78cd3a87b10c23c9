"""What a SavedModel export should tell its user about serving it on a CPU like
the one it was made on: two settings that change a plain-graph step by a third
or more and that the export itself cannot make.

- bfloat16 products run natively only where the CPU has AVX512-BF16 or AMX;
  elsewhere TensorFlow emulates them and a bfloat16 export is slower than
  float32 (benchmarks/README.md, "On a CPU without AVX-512").
- TensorFlow turns its oneDNN kernels on by default only on x86 CPUs with
  AVX512_VNNI, AVX512_BF16 or AMX (TensorFlow 2.9's release notes); on older
  ones (AVX2) the plain graph runs on Eigen unless the process that serves it
  (`tensorflow_model_server`, or Python) starts with TF_ENABLE_ONEDNN_OPTS=1.
  TensorFlow reads the variable once, when it loads, so only the server's
  environment can set it.
"""

import os

from keras_transformer.training.precision import cpu_has_bfloat16

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def tensorflow_uses_onednn():
    """Whether this process's TensorFlow runs its oneDNN kernels (`IsMklEnabled`:
    the CPU's default, or TF_ENABLE_ONEDNN_OPTS as it was when TensorFlow loaded)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def serving_cpu_notes(quantize=None, jit_compile=False):
    """Notes (strings, possibly none) for an export with `quantize` and
    `jit_compile` made on this machine, read as advice for a server on a CPU
    of the same kind."""
    notes = []
    if quantize == "bfloat16" and not cpu_has_bfloat16():
        notes.append("this CPU has no bfloat16 units (AVX512-BF16 or AMX): TensorFlow emulates bfloat16 products "
                     "here, and a bfloat16 SavedModel decodes slower than a float32 one on such a CPU; export "
                     "float32 to serve here (benchmarks/README.md, 'On a CPU without AVX-512')")
    if not jit_compile and os.environ.get(ONEDNN_VARIABLE) is None and not tensorflow_uses_onednn():
        notes.append(f"TensorFlow leaves its oneDNN kernels off on this CPU (no AVX512_VNNI, AVX512_BF16 or AMX): "
                     f"a server on such a CPU runs the plain variant faster with {ONEDNN_VARIABLE}=1 in its "
                     f"environment (docs/serving.md, 'The server's CPU')")
    return notes
