"""Word alignments from cross-attention on the tiny copy and reverse models
trained afresh here (under TensorFlow, where training them is quick): their
links must follow the task. tests/test_alignments.py runs the same check
under every backend on weights trained once (tests/data/), with the
alignment tests that need no training."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: alignment_models
from alignment_models import TASKS, diagonal_shares, train  # noqa: E402


@pytest.mark.parametrize("task", TASKS)
def test_alignments_of_freshly_trained_models_follow_the_task(task):
    shares = diagonal_shares(train(task), task)
    assert shares[task] >= 0.9
    assert shares["copy" if task == "reverse" else "reverse"] < 0.5
