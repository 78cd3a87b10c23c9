"""`keras-transformer export --format marian-hf` of our trained test fixture, in Transformers.

Its own module, so that only it joins the easy_synthetic_run unit of work
(tests/conftest.py); the tiny-model tests are in test_marian_hf_export.py.
Greedy: EOS forced last in both searches (`--limit-rule force_eos`,
Transformers' forced_eos_token_id). Beam: exported under the `finish` rule,
without Transformers' forced EOS (which costs nothing there), see
keras_transformer/marian/run_export.py.
"""

import json

import pytest

from marian_folder import transformers_translate

from keras_transformer.cli import main

pytest.importorskip("torch")
pytest.importorskip("transformers")

EXTRA = 8  # the run's max_extra_length


def _translate(run_dir, capsys, texts, *options):
    arguments = ["translate", str(run_dir), "--max-extra-length", str(EXTRA), *options]
    for text in texts:
        arguments += ["--text", text]
    capsys.readouterr()
    assert main(arguments) == 0
    return capsys.readouterr().out.split("\n")[: len(texts)]


def test_trained_run_round_trip(easy_synthetic_run, tmp_path, capsys):
    """Our trained fixture, exported, in Transformers: greedy generate gives our greedy texts; the
    beam settings written (the run's GNMT penalty, said in a note) are the run's beams and alpha."""
    run_dir, test = easy_synthetic_run
    texts = [source for source, _ in test[:6]]
    assert main(["export", str(run_dir), "--format", "marian-hf", "--output", str(tmp_path / "hf")]) == 0
    assert "Transformers cannot express" in capsys.readouterr().err
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"], generation["max_length"]) == (4, 0.6, 48 + 8 + 1)
    assert generation["forced_eos_token_id"] == 0  # the run's limit rule is not finish: Marian's forced EOS
    expected = _translate(run_dir, capsys, texts, "--beam-size", "1", "--limit-rule", "force_eos")
    assert any(expected)
    assert transformers_translate(tmp_path / "hf", texts, EXTRA, num_beams=1) == expected
    # Beam: exported under the length rule and the finish limit, the folder's own generation settings
    # (4 beams, length_penalty 0.6, early_stopping never, no forced EOS) give our beam search's texts.
    rule = ["--length-penalty", "length", "--limit-rule", "finish"]
    assert main(["export", str(run_dir), "--format", "marian-hf", "--output", str(tmp_path / "beam"), *rule]) == 0
    assert "Transformers cannot express" not in capsys.readouterr().err
    assert transformers_translate(tmp_path / "beam", texts, EXTRA) == _translate(run_dir, capsys, texts, *rule)
    # And back in (recipes/opus_mt/trip.py's first links): imported, the folder (its model axis
    # permuted to Marian's sinusoids, its BOS an id of the folder, layer norms at Marian's epsilon)
    # gives the run's own greedy texts (greedy only: a beam search traced for one more model costs
    # minutes here; trip.py compares beam texts at full size).
    assert main(["import", str(tmp_path / "hf"), str(tmp_path / "imported")]) == 0
    assert _translate(tmp_path / "imported", capsys, texts, "--beam-size", "1", "--limit-rule", "force_eos") == expected
