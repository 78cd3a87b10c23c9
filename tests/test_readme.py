"""The README's Python examples run as written, so they cannot go stale."""

import re
from pathlib import Path

import keras
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the README example trains through tf.data once; every layer it uses is tested on all backends",
)
def test_readme_python_examples_run():
    blocks = python_blocks()
    assert blocks, "README.md has no ```python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "__readme__"})
