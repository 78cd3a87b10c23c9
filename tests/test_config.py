import json

import pytest

from keras_transformer import config as config_lib
from keras_transformer.config import ConfigError


def test_defaults_cover_every_schema_key():
    config = config_lib.defaults()
    assert set(config) == set(config_lib.SCHEMA)
    assert config["training"]["label_smoothing"] == 0.1
    assert config["decoding"] == {"beam_size": 4, "alpha": 0.6, "max_extra_length": 50, "batch_size": 64,
                                  "limit_rule": "fallback", "length_penalty": "gnmt", "target_language": None}


def test_paper_presets_follow_the_paper():
    base = config_lib.resolve(preset="wmt14-base")
    big = config_lib.resolve(preset="wmt14-big")
    assert base["model"]["preset"] == "base" and big["model"]["preset"] == "big"
    assert base["training"]["tokens_per_batch"] == 25000
    assert base["training"]["warmup_steps"] == 4000
    assert (base["training"]["average_last"], big["training"]["average_last"]) == (5, 20)
    assert base["data"]["vocabulary_size"] == 37000


def test_english_french_presets_follow_the_paper():
    """Section 5: 32k shared word pieces; Table 3's notes: the En-Fr big model drops out 0.1, not 0.3."""
    base = config_lib.resolve(preset="wmt14-en-fr-base")
    big = config_lib.resolve(preset="wmt14-en-fr-big")
    en_de_big = config_lib.resolve(preset="wmt14-big")
    assert (base["model"]["preset"], big["model"]["preset"]) == ("base", "big")
    assert big["model"]["dropout"] == 0.1 and en_de_big["model"]["dropout"] is None  # the preset's 0.3
    assert base["model"]["dropout"] is None  # the base preset's 0.1
    for config in (base, big):
        assert config["data"]["vocabulary_size"] == 32000
        assert (config["data"]["source_key"], config["data"]["target_key"]) == ("en", "fr")
        assert config["training"]["tokens_per_batch"] == 25000 and config["training"]["warmup_steps"] == 4000
        assert config["decoding"]["beam_size"] == 4 and config["decoding"]["alpha"] == 0.6
    assert (base["training"]["average_last"], big["training"]["average_last"]) == (5, 20)
    assert (base["training"]["max_steps"], big["training"]["max_steps"]) == (100000, 300000)
    assert big["training"]["keep_checkpoints"] >= 20


def test_files_then_assignments_override_in_order(tmp_path):
    yaml_file = tmp_path / "a.yaml"
    yaml_file.write_text("training:\n  epochs: 3\n  warmup_steps: 100\nmodel:\n  d_model: 64\n")
    json_file = tmp_path / "b.json"
    json_file.write_text(json.dumps({"training": {"epochs": 4}}))
    config = config_lib.resolve([yaml_file, json_file], assignments=["training.warmup_steps=7", "model.norm_first=true"])
    assert config["training"]["epochs"] == 4
    assert config["training"]["warmup_steps"] == 7
    assert config["model"]["d_model"] == 64
    assert config["model"]["norm_first"] is True
    assert config_lib.model_overrides(config["model"]) == {
        "d_model": 64, "attention_dropout": 0.0, "norm_first": True, "positional_encoding": "sinusoidal",
        "sinusoid_layout": "interleaved", "activation": "relu", "layer_norm_epsilon": 1e-6, "output_bias": False,
    }


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("training:\n  epoch: 3\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown key 'training.epoch' \(did you mean 'epochs'\?\)"):
        config_lib.resolve([path])


@pytest.mark.parametrize(
    "assignment,message",
    [
        ("training.epochs=three", "'training.epochs' must be an integer"),
        ("training.epochs=0", "'training.epochs' must be a positive integer"),
        ("model.preset=huge", "'model.preset' must be one of"),
        ("model.norm_first=maybe", "'model.norm_first' must be true or false"),
        ("decoding.alpha=-1", "'decoding.alpha' must be >= 0"),
        ("nonsense", "--set expects KEY=VALUE"),
    ],
)
def test_bad_values_are_named(assignment, message):
    with pytest.raises(ConfigError, match=message):
        config_lib.resolve(assignments=[assignment])


def test_unparsable_and_missing_files_are_named(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="broken.json: cannot parse"):
        config_lib.resolve([broken])
    with pytest.raises(ConfigError, match="missing.yaml: configuration file not found"):
        config_lib.resolve([tmp_path / "missing.yaml"])
    with pytest.raises(ConfigError, match="unknown --preset"):
        config_lib.resolve(preset="wmt15")


def test_a_config_file_can_start_from_a_run_preset(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("preset: wmt14-big\noutput_dir: runs/x\ntraining: {max_steps: 10}\n")
    config = config_lib.resolve([path])
    assert config["model"]["preset"] == "big" and config["training"]["average_last"] == 20
    assert config["training"]["max_steps"] == 10  # the file's own keys come after the preset's
    path.write_text("preset: wmt14-huge\n")
    with pytest.raises(ConfigError, match=r"run.yaml: unknown preset 'wmt14-huge'; choose one of"):
        config_lib.resolve([path])
