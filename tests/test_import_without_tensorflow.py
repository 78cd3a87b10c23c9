"""Under JAX and torch the backend-agnostic package imports on a machine
without TensorFlow (the rule in `keras_transformer/_tensorflow.py`).

A fresh process with `sys.modules["tensorflow"] = None` (every
`import tensorflow` raises ImportError) imports the package, its
backend-agnostic subpackages and the corpus readers, and still reaches
TensorFlow-only names only as a clear ImportError.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["tensorflow"] = None  # any import of tensorflow now fails

    import keras_transformer
    import keras_transformer.data
    import keras_transformer.datasets
    import keras_transformer.decoding
    import keras_transformer.decoding.evaluation
    import keras_transformer.export
    import keras_transformer.marian.checkpoint
    import keras_transformer.marian.convert
    import keras_transformer.run.shortlist
    import keras_transformer.run.stages
    import keras_transformer.run.train
    import keras_transformer.run.trained
    import keras_transformer.run.translate
    import keras_transformer.run.workers
    import keras_transformer.training
    from keras_transformer._tensorflow import tensorflow
    from keras_transformer.data import read_jsonl
    from keras_transformer.run.data import _train_step_uses_xla

    assert tensorflow() is None
    _train_step_uses_xla()
    keras_transformer.marian.convert.MarianIds.for_export(8)
    try:
        keras_transformer.data.SubwordTokenizer
    except ImportError as error:
        print("tokenizer:", error)
    else:
        raise AssertionError("the tokenizer imported without TensorFlow")
    print("ok", keras_transformer.Transformer.__name__, read_jsonl.__name__)
""")


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="TensorFlow is the backend here")
def test_package_imports_without_tensorflow():
    env = dict(os.environ, KERAS_BACKEND=keras.backend.backend(),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    completed = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    lines = completed.stdout.splitlines()
    assert lines[-1] == "ok Transformer read_jsonl"
    assert lines[0].startswith("tokenizer:") and "tensorflow" in lines[0]
