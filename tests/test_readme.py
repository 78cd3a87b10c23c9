"""The README's Python examples run as written, so they cannot go stale."""

import contextlib
import io
import re
from pathlib import Path

import keras
import numpy as np
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def base_parameters(vocabulary=37000, d=512, d_ff=2048, layers=6):
    """The base model's parameter count, worked out by hand from the paper's
    architecture: a shared embedding (tied to the softmax, no output bias),
    attention = 4 projections with biases, feed-forward with biases, a
    LayerNorm (scale, shift) after each sub-layer; no final norm (post-LN)."""
    attention = 4 * (d * d + d)
    feed_forward = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    return vocabulary * d + layers * encoder_layer + layers * decoder_layer


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the README example trains through tf.data once; every layer it uses is tested on all backends",
)
def test_readme_python_examples_run():
    blocks = python_blocks()
    assert blocks, "README.md has no ```python example"
    for block in blocks:
        printed = io.StringIO()
        namespace = {"__name__": "__readme__"}
        with contextlib.redirect_stdout(printed):
            exec(compile(block, str(README), "exec"), namespace)
        output = printed.getvalue()
        if "from_preset('base'" in block:
            # What the example prints: sacreBLEU scores, then the base model's size.
            assert "'bleu_signature': 'nrefs:1|case:mixed|eff:no|tok:13a" in output
            assert f"{base_parameters():,} parameters" in output, output
            if "logits" in namespace:  # the longer example of docs/getting-started.md (tests/tf/test_docs.py)
                np.testing.assert_allclose(
                    keras.ops.convert_to_numpy(namespace["logits"]),
                    keras.ops.convert_to_numpy(namespace["model"](namespace["inputs"])), atol=1e-5,
                )
