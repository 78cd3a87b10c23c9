"""The batch plan: every kept pair once per epoch, batches within their
bucket's budget, workers that share an epoch without overlap, and a plan
that depends on nothing but its arguments (so a resumed run sees the
batches an uninterrupted one would).

The references here are written independently of `batch_plan`: the bucket
of a length is found by a linear scan, the budget by integer division.
"""

import numpy as np
import pytest

from keras_transformer.data.batch_plan import BatchPlan

BOUNDARIES = [4, 8, 16, 32]


def reference_bucket(length):
    for index, boundary in enumerate(BOUNDARIES):
        if length <= boundary:
            return index
    return None


def lengths_of(count, seed=0):
    return np.random.default_rng(seed).integers(2, 40, size=count)


def epoch_batches(plan, epoch):
    return [plan.batch(epoch * plan.steps_per_epoch + position) for position in range(plan.steps_per_epoch)]


@pytest.mark.parametrize("tokens_per_batch", [7, 64, 1000])
def test_every_kept_pair_once_per_epoch_in_its_own_bucket(tokens_per_batch):
    lengths = lengths_of(500)
    plan = BatchPlan(lengths, BOUNDARIES, tokens_per_batch, seed=3)
    kept = [i for i, length in enumerate(lengths) if reference_bucket(length) is not None]
    assert plan.num_pairs == len(kept) and plan.left_out == 500 - len(kept)
    for epoch in range(2):
        seen = []
        for pair_ids, width in epoch_batches(plan, epoch):
            buckets = {reference_bucket(lengths[i]) for i in pair_ids}
            assert buckets == {BOUNDARIES.index(width)}
            assert 1 <= len(pair_ids) <= max(1, tokens_per_batch // width)
            seen.extend(pair_ids.tolist())
        assert sorted(seen) == kept


def test_batches_fill_their_budget_except_one_per_bucket():
    lengths = lengths_of(2000, seed=1)
    plan = BatchPlan(lengths, BOUNDARIES, 128, seed=0)
    partial = {}
    for pair_ids, width in epoch_batches(plan, 0):
        if len(pair_ids) < 128 // width:
            partial[width] = partial.get(width, 0) + 1
    assert all(count == 1 for count in partial.values())
    expected = sum(-(-sum(reference_bucket(x) == b for x in lengths) // (128 // w)) for b, w in enumerate(BOUNDARIES))
    assert plan.steps_per_epoch == expected


def test_the_plan_is_a_function_of_its_arguments():
    lengths = lengths_of(300)
    first, second = BatchPlan(lengths, BOUNDARIES, 64, seed=5), BatchPlan(lengths, BOUNDARIES, 64, seed=5)
    # A fresh plan asked for step 40 first (a resumed run) gives what the first one gives in sequence.
    late = [second.batch(step) for step in range(40, 60)]
    in_order = [first.batch(step) for step in range(60)][40:]
    for (a, wa), (b, wb) in zip(late, in_order):
        assert wa == wb and a.tolist() == b.tolist()
    other_seed = BatchPlan(lengths, BOUNDARIES, 64, seed=6)
    assert [b.tolist() for b, _ in epoch_batches(other_seed, 0)] != [b.tolist() for b, _ in epoch_batches(first, 0)]
    # Epochs are shuffled afresh.
    assert [b.tolist() for b, _ in epoch_batches(first, 0)] != [b.tolist() for b, _ in epoch_batches(first, 1)]


@pytest.mark.parametrize("num_workers", [2, 3, 5])
def test_workers_share_each_epoch_without_overlap(num_workers):
    lengths = lengths_of(701, seed=2)
    plans = [BatchPlan(lengths, BOUNDARIES, 96, seed=1, num_workers=num_workers, worker=w)
             for w in range(num_workers)]
    single = BatchPlan(lengths, BOUNDARIES, 96, seed=1)
    assert len({plan.steps_per_epoch for plan in plans}) == 1
    assert plans[0].steps_per_epoch * num_workers >= single.steps_per_epoch
    for epoch in range(2):
        seen = [i for plan in plans for ids, _ in epoch_batches(plan, epoch) for i in ids.tolist()]
        assert len(seen) == len(set(seen)) == single.num_pairs


def test_max_length_leaves_out_longer_pairs():
    lengths = np.array([3, 9, 10, 11, 31, 33])
    plan = BatchPlan(lengths, BOUNDARIES, 1000, max_length=10)
    assert plan.left_out == 3
    assert sorted(i for ids, _ in epoch_batches(plan, 0) for i in ids.tolist()) == [0, 1, 2]


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="boundaries"):
        BatchPlan([3], [8, 4], 100)
    with pytest.raises(ValueError, match="worker"):
        BatchPlan([3], BOUNDARIES, 100, num_workers=2, worker=2)
    # Three single-pair batches cannot be dealt evenly to two workers.
    with pytest.raises(ValueError, match="workers"):
        BatchPlan([3, 3, 3], BOUNDARIES, 4, num_workers=2)
    with pytest.raises(ValueError, match="step"):
        BatchPlan([3], BOUNDARIES, 100).batch(-1)
