"""The documentation site: `mkdocs build --strict` passes, the configuration
reference is generated from `keras_transformer/config.py`, and every Python
block of docs/*.md runs as written (the shell commands run in
test_readme_commands.py). Nothing here is skipped: without MkDocs (the docs
extra, which `make test` installs) the build test fails.
"""

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_hook():
    import importlib.util

    spec = importlib.util.spec_from_file_location("config_reference", DOCS / "_hooks" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schema_keys():
    from keras_transformer import config

    keys = []
    for name, spec in config.SCHEMA.items():
        keys += [f"{name}.{key}" for key in spec] if isinstance(spec, dict) else [name]
    return keys


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    import mkdocs  # noqa: F401  (the docs extra; an ImportError fails the test, it does not skip it)

    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return site_dir


def test_mkdocs_build_strict_makes_every_page(site):
    for page in ("getting-started", "training", "large-corpora", "configuration", "decoding", "serving",
                 "recipes", "distributed", "benchmarks", "paper", "api", "keras-hub"):
        assert (site / page / "index.html").is_file(), page
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("MultiHeadAttention", "Transformer", "paper_optimizer", "Translator", "export_saved_model",
                 "SubwordTokenizer", "corpus_scores", "transformer_from_checkpoint", "write_marian_hf"):
        assert name in api, f"the API reference lacks {name}"


def test_configuration_page_lists_every_key_of_the_schema(site):
    from keras_transformer import config

    page = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    missing = [key for key in schema_keys() if f"<code>{key}</code>" not in page]
    assert not missing, f"keys of config.SCHEMA missing from the built configuration page: {missing}"
    assert all(f"<code>{preset}</code>" in page for preset in config.RUN_PRESETS)
    assert "config-reference" not in page  # the marker was replaced


def test_configuration_reference_is_generated_from_the_schema():
    """One row per key with its default, allowed values and meaning, from SCHEMA itself; the page's
    source holds no hand-written key, only the marker the build replaces."""
    from keras_transformer import config

    reference = load_hook().reference_markdown()
    rows = [line for line in reference.splitlines() if line.startswith("| `") and "." in line.split("|")[1]
            or line.startswith("| `output_dir`")]
    assert len(rows) == len(schema_keys())
    default, kind, meaning = config.SCHEMA["decoding"]["beam_size"]
    assert f"| `decoding.beam_size` | `{default}` | `int` | {meaning} |" in reference
    assert "| `model.preset` | `'tiny'` | one of `tiny`, `base`, `big` |" in reference
    assert "`model.preset=base`" in reference  # wmt14-base
    source = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert "<!-- config-reference -->" in source and "decoding.beam_size" not in source


def docs_python_blocks():
    blocks = []
    for page in sorted(DOCS.glob("*.md")):
        blocks += [(page.name, block) for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]
    return blocks


def base_parameters(vocabulary=37000, d=512, d_ff=2048, layers=6):
    """The paper's base model, counted by hand: a shared embedding tied to the softmax, attention = 4
    projections with biases, feed-forward with biases, a LayerNorm after each sub-layer."""
    attention = 4 * (d * d + d)
    feed_forward = d * d_ff + d_ff + d_ff * d + d
    return vocabulary * d + layers * (attention + feed_forward + 4 * d) + layers * (2 * attention + feed_forward + 6 * d)


# Functions the docs define for the reader to call (a multi-worker script, gRPC and REST clients).
DOCUMENTED_FUNCTIONS = ("train_on_this_host", "translate_remote", "translate_grpc")


def test_docs_python_blocks_run(tmp_path, monkeypatch):
    assert keras.backend.backend() == "tensorflow"
    monkeypatch.chdir(tmp_path)
    blocks = docs_python_blocks()
    assert {name for name, _ in blocks} >= {"getting-started.md", "serving.md", "distributed.md"}
    # Each check below is owed by some block: a page that drops (or rewrites) its example fails here
    # instead of leaving the check unexercised.
    checked = set()
    for name, block in blocks:
        printed = io.StringIO()
        namespace = {"__name__": "__docs__"}  # a script's `if __name__ == "__main__":` part does not run
        with contextlib.redirect_stdout(printed):
            exec(compile(block, str(DOCS / name), "exec"), namespace)
        output = printed.getvalue()
        if "from_preset('base'" in block:
            checked.add("base preset")
            assert "'bleu_signature': 'nrefs:1|case:mixed|eff:no|tok:13a" in output
            assert f"{base_parameters():,} parameters" in output, output
            np.testing.assert_allclose(keras.ops.convert_to_numpy(namespace["logits"]),
                                       keras.ops.convert_to_numpy(namespace["model"](namespace["inputs"])), atol=1e-5)
        if "TransformerSeq2SeqLM" in block:  # keras-hub.md: LoRA leaves 6 adapted projections' 3 weights each
            assert "18 trainable weights" in output, output
        if "import ctranslate2" in block:
            checked.add("ctranslate2")
            assert output.strip(), "the CTranslate2 example printed no translation"
        for function in DOCUMENTED_FUNCTIONS:
            if f"def {function}" in block:
                checked.add(function)
                assert callable(namespace[function])
    assert checked == {"base preset", "ctranslate2", *DOCUMENTED_FUNCTIONS}, checked
