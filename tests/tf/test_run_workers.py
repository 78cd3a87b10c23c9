"""A non-chief worker waits for the chief's prepared data for `training.worker_wait_minutes` at
most, and gives up at once when the chief records its failure (not an earlier attempt's)."""

import time

import pytest

from keras_transformer.run.workers import chief_failure, clear_chief_failure, record_chief_failure, wait_for


def not_yet():
    raise ValueError("not prepared (no manifest.json)")


def test_waiting_ends_at_the_timeout_with_the_last_error():
    with pytest.raises(RuntimeError, match=r"waited 0s for the data \(training.worker_wait_minutes\): not prepared"):
        wait_for(not_yet, "the data", timeout_s=0, every_s=0)
    answers = iter([ValueError("no"), ValueError("no"), None])

    def ready_third_time():
        answer = next(answers)
        if answer is not None:
            raise answer
        return "ready"

    assert wait_for(ready_third_time, "the data", timeout_s=60, every_s=0) == "ready"


def test_the_chiefs_failure_ends_the_wait(tmp_path):
    started = time.time()
    assert chief_failure(tmp_path, started) is None
    record_chief_failure(tmp_path, ValueError("data.train corpus.tsv: no such corpus file"))
    with pytest.raises(RuntimeError, match="gave up waiting for the data: the chief failed .*chief-failed.json.*"
                                           "ValueError: data.train corpus.tsv: no such corpus file"):
        wait_for(not_yet, "the data", timeout_s=3600, every_s=0, failed=lambda: chief_failure(tmp_path, started))
    # An earlier attempt's failure (recorded well before this worker started) does not count,
    # and the chief clears it when it starts again.
    assert chief_failure(tmp_path, started + 3600) is None
    clear_chief_failure(tmp_path)
    assert chief_failure(tmp_path, started) is None
