"""A trained run as a KerasHub preset (keras_transformer.hub): exported with
`keras-transformer export --format keras-hub` and loaded by
`keras_hub.models.Seq2SeqLM.from_preset`, it translates exactly as
`keras-transformer translate` does (beam and greedy). The tokenizer,
preprocessor, fit() and preset checks on a tiny model:
tests/tf/test_hub_text.py; the backbone and generate() on every backend:
tests/test_hub.py."""

import json

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from keras_transformer import cli  # noqa: E402
from keras_transformer.hub import (  # noqa: E402
    TransformerSeq2SeqLM, TransformerSeq2SeqLMPreprocessor, TransformerTokenizer,
)
from keras_transformer.run import translate as run_translate  # noqa: E402


@pytest.fixture(scope="module")
def run_preset(easy_synthetic_run, tmp_path_factory):
    run_dir, _ = easy_synthetic_run
    folder = tmp_path_factory.mktemp("hub") / "preset"
    assert cli.main(["export", str(run_dir), "--format", "keras-hub", "--output", str(folder)]) == 0
    return folder


def test_a_run_as_a_preset_translates_as_the_run(run_preset, easy_synthetic_run, easy_synthetic_model, capsys):
    _, test_pairs = easy_synthetic_run
    model, tokenizer, config = easy_synthetic_model
    texts = [source for source, _ in test_pairs[:8]]
    task = keras_hub.models.Seq2SeqLM.from_preset(str(run_preset))  # the generic KerasHub entry point
    assert type(task) is TransformerSeq2SeqLM and type(task.preprocessor) is TransformerSeq2SeqLMPreprocessor
    assert task.decoding == config["decoding"] and task.max_source_length == config["data"]["max_length"]

    def translate(decoding):  # what `keras-transformer translate RUN_DIR` runs (cli.commands.cmd_translate)
        return run_translate.translate_texts(model, tokenizer, texts, decoding,
                                             max_source_length=config["data"]["max_length"])

    beam = task.generate(texts)
    assert beam == translate(config["decoding"])
    greedy = task.generate(texts, beam_size=1)
    assert greedy == translate({**config["decoding"], "beam_size": 1})
    # Each option reaches its search. The texts alone cannot show it: a well-trained model's beam and greedy
    # texts can agree on all eight (they did on the float32-trained fixture of a CPU without bfloat16).
    assert (task.translator().beam_size, task.translator(beam_size=1).beam_size) == (config["decoding"]["beam_size"], 1)
    assert config["decoding"]["beam_size"] > 1
    assert task.generate(texts[0]) == beam[0]
    # The preset's parts load on their own too.
    backbone = keras_hub.models.Backbone.from_preset(str(run_preset))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(backbone.transformer.weights[0]),
                                  keras.ops.convert_to_numpy(model.weights[0]))
    hub_tokenizer = keras_hub.models.Tokenizer.from_preset(str(run_preset))
    assert type(hub_tokenizer) is TransformerTokenizer
    ids = tokenizer.tokenize(texts[:2])
    assert [list(row) for row in hub_tokenizer(texts[:2])] == ids.to_list()  # eager: Python lists
    assert list(hub_tokenizer.detokenize(ids)) == [text.decode() for text in tokenizer.detokenize(ids).numpy()]


def test_export_command_takes_decoding_flags_and_refuses_what_it_cannot_do(run_preset, easy_synthetic_run,
                                                                          tmp_path, capsys):
    run_dir, _ = easy_synthetic_run
    folder = tmp_path / "greedy"
    assert cli.main(["export", str(run_dir), "--format", "keras-hub", "--output", str(folder), "--beam-size", "1",
                     "--alpha", "0.2"]) == 0
    decoding = json.loads((folder / "task.json").read_text())["config"]["decoding"]
    assert (decoding["beam_size"], decoding["alpha"]) == (1, 0.2)
    with pytest.raises(SystemExit, match="not empty"):
        cli.main(["export", str(run_dir), "--format", "keras-hub", "--output", str(run_preset)])
    with pytest.raises(SystemExit, match="--quantize do not apply to --format keras-hub"):
        cli.main(["export", str(run_dir), "--format", "keras-hub", "--quantize", "int8"])
