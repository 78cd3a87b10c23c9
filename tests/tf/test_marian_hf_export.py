"""`keras-transformer export --format marian-hf`, and our beam search held to Transformers' `generate`.

The references are Transformers' `MarianMTModel.generate` and `MarianTokenizer`
(torch CPU) reading the exported folder. Both searches get the same length
limit: ours the source length (EOS included) + EXTRA tokens, Transformers'
`max_length` = that + the decoder start. Greedy: EOS forced last in both
(`--limit-rule force_eos`, forced_eos_token_id). Beam: Transformers' forced
EOS costs nothing (its log-probability is set to 0), which no rule of ours
does, so the beam tests turn it off and use our `finish` rule (a hypothesis
cut at the limit competes as it is, as Transformers' max-length criterion
finishes it).
"""

import json

import numpy as np
import pytest

from marian_folder import make_marian_folder, transformers_translate

from keras_transformer.cli import main

pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXTS = ["The cat runs.", "A small green house sees the dog!", "big big big river today old new", "a",
         "Today the old dog walks quickly.", "red river", "The new house sees a small cat today."]
EXTRA = 6
LIMIT = ["--max-extra-length", str(EXTRA), "--limit-rule", "force_eos"]
# Transformers' canonical beam search: the stopping bound of ours (its best live score at the limit).
BEAM_FLAGS = {"num_beams": 4, "length_penalty": 1.0, "early_stopping": "never"}
BEAM = ["--beam-size", "4", "--alpha", "1.0", "--max-extra-length", str(EXTRA), "--limit-rule", "finish"]


def _generate(folder, texts, extra=EXTRA, **flags):
    return transformers_translate(folder, texts, extra, **flags)


def _translate(run_dir, capsys, texts, *options):
    arguments = ["translate", str(run_dir), *options]
    for text in texts:
        arguments += ["--text", text]
    capsys.readouterr()
    assert main(arguments) == 0
    return capsys.readouterr().out.split("\n")[: len(texts)]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(Transformers folder, our import of it) of test_marian_cli's tiny random MarianMT model."""
    root = tmp_path_factory.mktemp("marian-hf")
    folder = make_marian_folder(root / "hf", model=True)
    assert main(["import", str(folder), str(root / "run")]) == 0
    return folder, root / "run"


def test_beam_search_under_the_length_rule_equals_transformers(imported, capsys):
    folder, run_dir = imported
    expected = _generate(folder, TEXTS, forced_eos_token_id=None, **BEAM_FLAGS)
    assert _translate(run_dir, capsys, TEXTS, *BEAM, "--length-penalty", "length") == expected
    # The test can fail: GNMT's penalty ranks differently (here on 4 of the 7 sentences).
    assert _translate(run_dir, capsys, TEXTS, *BEAM, "--length-penalty", "gnmt") != expected


def test_import_export_import_keeps_weights_and_texts(imported, tmp_path, capsys):
    from keras_transformer.run import trained as run_trained

    folder, run_dir = imported
    assert main(["export", str(run_dir), "--format", "marian-hf", "--output", str(tmp_path / "hf")]) == 0
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".keras_transformer")]
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    # The run's own settings (the folder's 4 beams, Transformers' rule with 1.0).
    assert {key: generation[key] for key in BEAM_FLAGS} == BEAM_FLAGS
    assert main(["import", str(tmp_path / "hf"), str(tmp_path / "again")]) == 0
    first, second = run_trained.load_model(run_dir), run_trained.load_model(tmp_path / "again")
    assert len(first.weights) == len(second.weights)
    for a, b in zip(first.weights, second.weights, strict=True):
        assert a.path.split("/", 1)[1] == b.path.split("/", 1)[1]  # (the model's own name differs)
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    greedy = ["--beam-size", "1", *LIMIT]
    assert _translate(tmp_path / "again", capsys, TEXTS, *greedy) == _translate(run_dir, capsys, TEXTS, *greedy)
    # Transformers reads the written folder (its tokenizer too) as the original one.
    assert _generate(tmp_path / "hf", TEXTS, num_beams=1) == _generate(folder, TEXTS, num_beams=1)


def test_bad_requests_are_refused_and_leave_nothing(imported, tmp_path, capsys):
    _, run_dir = imported
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    assert main(["export", str(run_dir), "--format", "marian-hf", "--output", str(output)]) == 2
    assert "not empty; give a new --output, or --force" in capsys.readouterr().err
    assert main(["export", str(run_dir), "--format", "marian-hf", "--output", str(tmp_path / "gnmt"),
                 "--length-penalty", "gnmt"]) == 2
    assert "Transformers has no GNMT length penalty" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--quantize do not apply to --format marian-hf"):
        main(["export", str(run_dir), "--format", "marian-hf", "--quantize", "int8"])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
    assert [path.name for path in output.iterdir()] == ["keep.txt"]
    assert main(["export", str(run_dir), "--format", "marian-hf", "--output", str(output), "--force"]) == 0
    assert (output / "model.safetensors").is_file() and not (output / "keep.txt").exists()


def test_separate_vocabularies_go_back_with_their_own_files(tmp_path, capsys):
    """An imported model with separate source and target vocabularies, exported: Transformers reads
    vocab.json and target_vocab.json and greedy-generates our greedy texts."""
    folder = make_marian_folder(tmp_path / "hf", separate_vocabs=True, model=True)
    assert main(["import", str(folder), str(tmp_path / "run")]) == 0
    assert main(["export", str(tmp_path / "run"), "--format", "marian-hf", "--output", str(tmp_path / "out")]) == 0
    tokenizer_config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert tokenizer_config["separate_vocabs"] and (tmp_path / "out" / "target_vocab.json").is_file()
    expected = _translate(tmp_path / "run", capsys, TEXTS, "--beam-size", "1", *LIMIT)
    assert _generate(tmp_path / "out", TEXTS, num_beams=1) == expected
