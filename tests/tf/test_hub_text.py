"""keras_transformer.hub with texts, on a tiny model: the preprocessor gives
the training pipeline's batches, `fit()` on text pairs lowers the loss,
`import keras_transformer` registers the classes with KerasHub, and a preset
with a missing or altered file fails naming it. (A trained run as a preset:
tests/tf/test_hub_presets.py.)"""

import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

keras_hub = pytest.importorskip("keras_hub")

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.hub import PresetError, TransformerBackbone, TransformerSeq2SeqLM  # noqa: E402


@pytest.fixture(scope="module")
def pairs():
    from keras_transformer.datasets.synthetic_en_de import make_splits

    return make_splits(0, 24, seed=1)[1]


@pytest.fixture(scope="module")
def tiny_task(pairs):
    """A tiny random model and a tokenizer trained here: a task to train and to break."""
    from keras_transformer.data import SubwordTokenizer

    tokenizer = SubwordTokenizer.train(pairs, 120, hard_vocab_limit=False, seed=0, num_threads=1)
    keras.utils.set_random_seed(0)
    model = Transformer(tokenizer.vocabulary_size, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                        num_decoder_layers=1, dropout=0.0)
    model.build()
    return TransformerSeq2SeqLM.from_transformer(model, tokenizer, encoder_sequence_length=24,
                                                 decoder_sequence_length=24)


def test_preprocessor_gives_the_training_pipelines_batches(tiny_task, pairs):
    from keras_transformer.data.pipeline import make_dataset

    tokenizer = tiny_task.preprocessor.tokenizer.subword_tokenizer
    pairs = list(pairs[:6]) + [(pairs[6][0] * 4, pairs[6][1] * 4)]  # the last one is cut
    x, y, weights = tiny_task.preprocessor({"encoder_text": [s for s, _ in pairs],
                                            "decoder_text": [t for _, t in pairs]})
    expected = {}
    for inputs, labels in make_dataset(pairs, tokenizer, max_length=24, on_long="truncate", training=False,
                                       tokens_per_batch=10_000, pad_to_bucket_boundary=False):
        for source, target, label in zip(inputs["source"].numpy(), inputs["target"].numpy(), labels.numpy()):
            expected[tuple(np.trim_zeros(source, "b"))] = (np.trim_zeros(target, "b"), np.trim_zeros(label, "b"))
    assert len(expected) == len(pairs)
    for source, target, label, weight in zip(x["encoder_token_ids"].numpy(), x["decoder_token_ids"].numpy(),
                                             y.numpy(), weights.numpy()):
        want_target, want_label = expected[tuple(np.trim_zeros(source, "b"))]
        np.testing.assert_array_equal(np.trim_zeros(target, "b"), want_target)
        np.testing.assert_array_equal(np.trim_zeros(label, "b"), want_label)
        np.testing.assert_array_equal(weight, (label != 0).astype("float32"))
    assert len(np.trim_zeros(x["encoder_token_ids"].numpy()[-1], "b")) == 24  # cut to the length, EOS last


def test_fit_on_text_pairs_lowers_the_loss(tiny_task, pairs):
    pairs = pairs[:16]
    data = tf.data.Dataset.from_tensor_slices(
        {"encoder_text": [s for s, _ in pairs], "decoder_text": [t for _, t in pairs]}).batch(8)
    tiny_task.compile(optimizer=keras.optimizers.Adam(0.01), jit_compile=False)
    history = tiny_task.fit(data, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0], losses


@pytest.fixture(scope="module")
def tiny_preset(tiny_task, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny") / "preset"
    tiny_task.save_to_preset(str(folder))
    return folder


def test_import_keras_transformer_registers_the_classes_with_keras_hub(tiny_preset):
    """In a fresh process, `import keras_transformer` (which does not import
    KerasHub) then `import keras_hub`: KerasHub's entry point finds our task."""
    script = ("import sys, keras_transformer\n"
              "assert 'keras_hub' not in sys.modules\n"
              "import keras_hub\n"
              "task = keras_hub.models.Seq2SeqLM.from_preset(sys.argv[1])\n"
              "print(type(task).__name__, type(task.preprocessor.tokenizer).__name__)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, KERAS_BACKEND="tensorflow", PYTHONPATH=root)
    result = subprocess.run([sys.executable, "-c", script, str(tiny_preset)], capture_output=True, text=True,
                            env=env, timeout=300, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["TransformerSeq2SeqLM", "TransformerTokenizer"]


def test_a_preset_with_a_missing_or_altered_file_fails_naming_it(tiny_preset, tmp_path):
    saved = tiny_preset
    assert isinstance(keras_hub.models.Seq2SeqLM.from_preset(str(saved)), TransformerSeq2SeqLM)

    def broken(name, change):
        folder = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        shutil.copytree(saved, folder)
        change(folder / name)
        return str(folder)

    def flip_a_byte(path):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))

    for name in ("model.weights.h5", "assets/tokenizer/sentencepiece.model", "task.json"):
        with pytest.raises(PresetError, match=f"{name} is missing"):
            keras_hub.models.Seq2SeqLM.from_preset(broken(name, lambda path: path.unlink()))
    weights = broken("model.weights.h5", flip_a_byte)
    with pytest.raises(PresetError, match="model.weights.h5 was altered"):
        keras_hub.models.Seq2SeqLM.from_preset(weights)
    with pytest.raises(PresetError, match="model.weights.h5 was altered"):
        keras_hub.models.Backbone.from_preset(weights)  # the backbone alone checks too
    changed = broken("config.json", lambda path: path.write_text(path.read_text().replace('"dropout": 0.0',
                                                                                            '"dropout": 0.5')))
    with pytest.raises(PresetError, match="config.json was altered"):
        keras_hub.models.Seq2SeqLM.from_preset(changed)
    assert isinstance(TransformerBackbone.from_preset(str(saved)), TransformerBackbone)
