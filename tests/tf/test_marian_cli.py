"""`keras-transformer import` of a tiny random MarianMT folder, then the run's commands,
against Transformers (generate + MarianTokenizer) and CTranslate2's own converter."""

import json
import subprocess
import sys
import warnings

import pytest

from marian_folder import make_marian_folder, transformers_translate

from keras_transformer.cli import main

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# (An empty source gives an empty translation here without a search; Transformers translates [EOS].)
TEXTS = ["The cat runs.", "A small green house sees the dog!", "Ünï ✓", "big big big river today old new", "a"]
# Outputs of a random model rarely end: both searches stop at the same length,
# ours after the source length (EOS included) + EXTRA tokens, with EOS forced
# last as Transformers' forced_eos_token_id does (--limit-rule force_eos).
EXTRA = 6
LIMIT = ["--max-extra-length", str(EXTRA), "--limit-rule", "force_eos"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("marian")
    folder = make_marian_folder(root / "hf", model=True)
    assert main(["import", str(folder), str(root / "run")]) == 0
    return folder, root / "run"


@pytest.fixture(scope="module")
def reference(imported):
    """Transformers' greedy translations of TEXTS (and of the >>deu<<-tagged TEXTS)."""
    folder, _ = imported
    return {"plain": transformers_translate(folder, TEXTS, EXTRA, num_beams=1),
            "deu": transformers_translate(folder, [">>deu<< " + t for t in TEXTS], EXTRA, num_beams=1)}


def _translate(run_dir, capsys, *options):
    arguments = ["translate", str(run_dir), "--beam-size", "1", *LIMIT]
    for text in TEXTS:
        arguments += ["--text", text]
    capsys.readouterr()
    assert main(arguments + list(options)) == 0
    return capsys.readouterr().out.split("\n")[: len(TEXTS)]


def test_import_writes_an_ordinary_run(imported):
    _, run_dir = imported
    names = {path.name for path in run_dir.iterdir()}
    assert {"config.json", "model.keras", "marian_tokenizer", "import.json"} <= names
    config = json.loads((run_dir / "config.json").read_text())
    # The folder's generation_config: num_beams 4, length_penalty 1.0 (Transformers' default), Marian's rule.
    decoding = config["decoding"]
    assert (decoding["beam_size"], decoding["length_penalty"], decoding["alpha"]) == (4, "length", 1.0)
    assert config["model"]["activation"] == "silu" and config["model"]["output_bias"] is True
    record = json.loads((run_dir / "import.json").read_text())
    assert record["language_codes"] == [">>deu<<", ">>fra<<"]
    assert not [path for path in run_dir.parent.iterdir() if path.name.startswith(".keras_transformer_import")]


def test_translate_equals_transformers_generate(imported, reference, capsys):
    _, run_dir = imported
    assert _translate(run_dir, capsys) == reference["plain"]


def test_target_language(imported, reference, capsys):
    _, run_dir = imported
    assert _translate(run_dir, capsys, "--target-language", "deu") == reference["deu"]
    assert main(["translate", str(run_dir), "--text", "x", "--target-language", "spa"]) == 2
    assert ">>spa<< is not in the vocabulary; the model's codes: >>deu<<, >>fra<<" in capsys.readouterr().err


# A process like TF Serving: TF and TF Text's op libraries, no Keras, no
# package of ours (test_export.py's server blocks the same way).
_SERVE = r"""
import glob, importlib.abc, importlib.machinery, importlib.util, json, os, sys

BLOCKED = ("keras", "keras_transformer", "tf_keras", "tensorflow_text", "sentencepiece")


class Refuse(importlib.abc.Loader):
    def create_module(self, spec):
        raise ImportError(f"{spec.name} is not installed on this server")

    def exec_module(self, module):
        raise ImportError(module.__name__)


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return importlib.machinery.ModuleSpec(name, Refuse(), origin=None)


tf_text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
sys.meta_path.insert(0, Block())
import tensorflow as tf

for library in sorted(glob.glob(os.path.join(tf_text_dir, "python", "ops", "_*.so"))):
    tf.load_op_library(library)
loaded = tf.saved_model.load(sys.argv[1])
out = loaded.signatures["serving_default"](text=tf.constant(json.loads(sys.argv[2])))
print(json.dumps([t.decode("utf-8") for t in out["translations"].numpy()]))
"""


def test_saved_model_export_gives_the_same_texts_without_keras(imported, reference, tmp_path, capsys):
    _, run_dir = imported
    assert main(["export", str(run_dir), "--base-dir", str(tmp_path), "--beam-size", "1", *LIMIT,
                 "--target-language", "deu", "--warmup-rows", "1"]) == 0
    version = next(path for path in (tmp_path / "translator").iterdir() if path.name.isdigit())
    served = subprocess.run([sys.executable, "-c", _SERVE, str(version), json.dumps(TEXTS)],
                            capture_output=True, text=True)
    assert served.returncode == 0, served.stderr[-3000:]
    assert json.loads(served.stdout) == reference["deu"]


def test_ctranslate2_export_equals_ctranslate2_converter(imported, tmp_path, capsys):
    """Greedy, the same length limit: our export (our tokenizer's pieces, our
    weights) against CTranslate2's own converter of the Transformers folder
    (Transformers' tokenizer)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from keras_transformer.export.ctranslate2 import CTranslate2Translator

    folder, run_dir = imported
    assert main(["export", str(run_dir), "--format", "ctranslate2", "--output", str(tmp_path / "ours"),
                 "--target-language", "fra"]) == 0
    ctranslate2.converters.TransformersConverter(str(folder)).convert(str(tmp_path / "theirs"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer = transformers.MarianTokenizer.from_pretrained(str(folder))
    theirs = ctranslate2.Translator(str(tmp_path / "theirs"), intra_threads=1)
    expected = []
    for text in TEXTS:
        tokens = tokenizer.convert_ids_to_tokens(tokenizer(">>fra<< " + text)["input_ids"])  # EOS included
        # (Their converter drops Marian's pad: decoding starts from a zero embedding.)
        result = theirs.translate_batch([tokens], beam_size=1, max_decoding_length=len(tokens) + EXTRA)[0]
        expected.append(tokenizer.decode(tokenizer.convert_tokens_to_ids(result.hypotheses[0]),
                                         skip_special_tokens=True))
    ours = CTranslate2Translator(str(tmp_path / "ours"), inter_threads=1, intra_threads=1)
    assert ours.translate(TEXTS, beam_size=1, max_extra_length=EXTRA) == expected


def test_bad_input_names_the_file_and_writes_nothing(imported, tmp_path, capsys):
    folder, run_dir = imported
    # RUN_DIR not empty.
    assert main(["import", str(folder), str(run_dir)]) == 2
    assert "not empty; give a new RUN_DIR, or --force" in capsys.readouterr().err
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in folder.iterdir():
        (broken / path.name).write_bytes(path.read_bytes())
    # A missing source.spm.
    (broken / "source.spm").rename(tmp_path / "source.spm")
    assert main(["import", str(broken), str(tmp_path / "run1")]) == 2
    assert f"{broken / 'source.spm'}: no such file" in capsys.readouterr().err
    (tmp_path / "source.spm").rename(broken / "source.spm")
    # A vocabulary that does not fit the model's embedding.
    vocabulary = json.loads((broken / "vocab.json").read_text())
    vocabulary["▁extra"] = len(vocabulary)
    (broken / "vocab.json").write_text(json.dumps(vocabulary))
    assert main(["import", str(broken), str(tmp_path / "run2")]) == 2
    assert f"{broken / 'vocab.json'}: the vocabulary does not match the model" in capsys.readouterr().err
    left = sorted(path.name for path in tmp_path.iterdir())
    assert left == ["broken"]  # no run1, run2, nor temporary folder


def _mean_loss(model, tokenizer, pairs):
    """Token-mean cross-entropy of `model` on `pairs` (no label smoothing), computed here."""
    import keras
    import numpy as np

    from keras_transformer.data import make_dataset

    total = count = 0.0
    for inputs, labels in make_dataset(pairs, tokenizer, tokens_per_batch=4096, max_length=64, training=False):
        logits = keras.ops.convert_to_numpy(model(inputs, training=False)).astype(np.float64)
        labels = np.asarray(labels)
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
        mask = labels != 0
        total -= picked[mask].sum()
        count += mask.sum()
    return total / count


def test_fine_tuning_an_imported_run(imported, tmp_path, capsys):
    """`train --init-from` an imported run: the corpus is encoded with the run's own
    tokenizer (pure Python, equal to the graph's ids), the tokenizer folder is kept,
    the loss on the corpus falls, and translate takes the fine-tuned run."""
    import numpy as np

    from marian_folder import WORDS_DE, WORDS_EN, sentences

    from keras_transformer.run import trained as run_trained

    _, run_dir = imported
    pairs = list(zip(sentences(WORDS_EN, 24, 7), sentences(WORDS_DE, 24, 7)))
    (tmp_path / "train.tsv").write_text("".join(f"{source}\t{target}\n" for source, target in pairs))
    tuned = tmp_path / "tuned"
    assert main(["train", "--config", str(run_dir / "config.json"), "--init-from", str(run_dir),
                 "--output-dir", str(tuned), "--train", str(tmp_path / "train.tsv"),
                 "--set", "training.max_steps=12", "--set", "training.warmup_steps=4",
                 "--set", "training.tokens_per_batch=256", "--set", "training.average_last=1",
                 "--set", "training.label_smoothing=0"]) == 0
    # The imported tokenizer, kept whole.
    assert sorted(p.name for p in (tuned / "marian_tokenizer").iterdir()) == sorted(
        p.name for p in (run_dir / "marian_tokenizer").iterdir())
    for path in (run_dir / "marian_tokenizer").iterdir():
        assert (tuned / "marian_tokenizer" / path.name).read_bytes() == path.read_bytes()
    assert not (tuned / "tokenizer.model").exists()
    base_model, base_tokenizer, _ = run_trained.load_run(run_dir)
    tuned_model, tuned_tokenizer, _ = run_trained.load_run(tuned)
    texts = TEXTS + [source for source, _ in pairs] + ["<unk> x </s>", ">>deu<< Das Haus."]
    assert tuned_tokenizer.tokenize(texts).to_list() == base_tokenizer.tokenize(texts).to_list()
    # The prepared data's pure-Python encoding is the graph tokenizer's, both sides.
    encoder = base_tokenizer.pair_encoder()
    assert encoder.encode_sources(texts) == base_tokenizer.tokenize(texts).to_list()
    targets = [target for _, target in pairs] + TEXTS
    assert encoder.encode_targets(targets) == base_tokenizer.tokenize_target(targets).to_list()
    # Weights changed, and the loss on the corpus fell.
    assert any(not np.array_equal(a, b) for a, b in zip(base_model.get_weights(), tuned_model.get_weights()))
    before, after = _mean_loss(base_model, base_tokenizer, pairs), _mean_loss(tuned_model, tuned_tokenizer, pairs)
    assert after < before - 0.5, (before, after)
    outputs = _translate(tuned, capsys)
    assert len(outputs) == len(TEXTS) and any(outputs)


def test_fine_tuning_an_imported_run_into_a_run_with_another_tokenizer_is_refused(imported, tmp_path, capsys):
    _, run_dir = imported
    (tmp_path / "train.tsv").write_text("The cat.\tDie Katze.\n")
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "tokenizer.model").write_bytes(b"another run's")
    assert main(["train", "--config", str(run_dir / "config.json"), "--init-from", str(run_dir),
                 "--output-dir", str(tmp_path / "tuned"), "--train", str(tmp_path / "train.tsv")]) == 2
    assert f"tokenizer mismatch: {tmp_path / 'tuned' / 'tokenizer.model'} is not the tokenizer of training.init_from" \
        in capsys.readouterr().err
    assert not (tmp_path / "tuned" / "marian_tokenizer").exists()


def _write_opus_mt_folder(folder, model):
    """test_marian_import.py's Marian-layout .npz writer (one table of Marian's names for the suite)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "test_marian_import.py"
    spec = importlib.util.spec_from_file_location("marian_import_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._write_opus_mt_folder(folder, model)


def test_opus_mt_release_folder(imported, reference, tmp_path, capsys):
    """An OPUS-MT release (Marian .npz, *.spm, one *.vocab.yml without <pad>, decoder.yml
    naming it) of the same weights and pieces translates as the Transformers folder."""
    import yaml

    folder, _ = imported
    release = tmp_path / "release"
    release.mkdir()
    _write_opus_mt_folder(release, transformers.MarianMTModel.from_pretrained(str(folder)))
    for name in ("source.spm", "target.spm"):
        (release / name).write_bytes((folder / name).read_bytes())
    vocabulary = json.loads((folder / "vocab.json").read_text())
    del vocabulary["<pad>"]  # Marian's own vocabulary has none; the converter appends it
    (release / "opus.spm32k-spm32k.vocab.yml").write_text(yaml.safe_dump(vocabulary, allow_unicode=True),
                                                          encoding="utf-8")
    with open(release / "decoder.yml", "a") as stream:
        stream.write("vocabs:\n  - opus.spm32k-spm32k.vocab.yml\n  - opus.spm32k-spm32k.vocab.yml\n")
    assert main(["import", str(release), str(tmp_path / "run")]) == 0
    assert _translate(tmp_path / "run", capsys) == reference["plain"]


def test_hub_source_offline_is_a_clear_error(tmp_path, monkeypatch, capsys):
    hub = pytest.importorskip("huggingface_hub")
    # No network in tests: the download must fail at once, and say so (the
    # constant is read when huggingface_hub is imported, the variable by a fresh import).
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert main(["import", "hf://Helsinki-NLP/opus-mt-en-de", str(tmp_path / "run")]) == 2
    assert "hf://Helsinki-NLP/opus-mt-en-de: the download failed" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert main(["import", "hf://just-a-name", str(tmp_path / "run")]) == 2
    assert "expected hf://OWNER/NAME" in capsys.readouterr().err
