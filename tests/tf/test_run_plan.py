"""A run's recorded batch plan (`run.data.check_plan`, `run.train.run_boundaries`): a run with
checkpoints resumes only on the plan they were trained on, and keeps its bucket boundaries
when the hardware it resumes on would default to others. (The refusal through a real resume:
tests/tf/test_prepared_resume.py.)"""

import numpy as np
import pytest

from keras_transformer.data.batch_plan import BatchPlan

LENGTHS = np.random.default_rng(0).integers(2, 30, size=500)


def _record(**changes):
    options = dict(boundaries=[8, 16, 24, 32], tokens_per_batch=100, seed=0, max_length=30) | changes
    return {"prepared_sha256": "a" * 64, **BatchPlan(LENGTHS, **options).record()}


def test_the_record_names_every_plan_input():
    record = _record()
    assert record == _record()
    assert record["boundaries"] == [8, 16, 24, 32] and record["tokens_per_batch"] == 100
    assert record["max_length"] == 30 and record["seed"] == 0 and record["shares"] == 1
    for change in ({"tokens_per_batch": 120}, {"seed": 1}, {"boundaries": [4, 8, 16, 32]}):
        assert _record(**change) != record
    # Two shares of one plan record the same plan but the share count.
    shares = [BatchPlan(LENGTHS, [8, 16, 24, 32], 100, num_workers=2, worker=w, max_length=30).record()
              for w in (0, 1)]
    assert shares[0] == shares[1] and shares[0]["shares"] == 2
    assert shares[0]["epoch_0_sha256"] == record["epoch_0_sha256"]


def test_a_resumed_run_with_another_plan_is_refused_naming_what_changed(tmp_path):
    from keras_transformer.run.data import PLAN_FILE, RunError, check_plan

    check_plan(tmp_path, _record(), has_checkpoints=False)
    written = (tmp_path / PLAN_FILE).read_text()
    check_plan(tmp_path, _record(), has_checkpoints=True)  # the same plan resumes
    with pytest.raises(RunError) as refused:
        check_plan(tmp_path, _record(tokens_per_batch=150, seed=3), has_checkpoints=True)
    message = str(refused.value)
    assert str(tmp_path / PLAN_FILE) in message
    assert "training.tokens_per_batch: 100 then, 150 now" in message and "training.seed: 0 then, 3 now" in message
    assert "steps per epoch" not in message  # what follows from the named inputs is not named
    assert "Set these back to resume, or train in a new output_dir" in message
    assert (tmp_path / PLAN_FILE).read_text() == written  # nothing changed
    # A run without checkpoints yet has trained on nothing: its plan is recorded anew.
    check_plan(tmp_path, _record(tokens_per_batch=150), has_checkpoints=False)
    check_plan(tmp_path, _record(tokens_per_batch=150), has_checkpoints=True)


def test_the_boundaries_are_the_runs_once_it_has_started(monkeypatch):
    from keras_transformer import config as config_lib
    from keras_transformer.run import data as run_data, train as run_train

    config = config_lib.defaults()
    config["data"]["max_length"] = 30
    started_on_cpu = {"boundaries": list(range(1, 31))}
    assert run_train.run_boundaries(config) == list(range(1, 31))  # TensorFlow on a CPU: no XLA
    monkeypatch.setattr(run_data, "_train_step_uses_xla", lambda: True)  # resumed where XLA compiles
    assert run_train.run_boundaries(config)[:3] == [8, 16, 24]  # a new run there: the geometric default
    assert run_train.run_boundaries(config, started_on_cpu) == list(range(1, 31))
    config["data"]["bucket_width"] = 8  # set: the setting (a change is refused by check_plan)
    assert run_train.run_boundaries(config, started_on_cpu) == [8, 16, 24, 32]
