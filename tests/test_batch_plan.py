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


def reference_batches(lengths, tokens_per_batch):
    """Batch sizes and widths of the plan's cutting, by a loop over the pairs sorted by length bucket: a
    batch closes with the budget of the bucket being read, once it has that many pairs, and is padded
    to its longest pair's boundary."""
    batches, pending = [], []
    for bucket in sorted(b for b in map(reference_bucket, lengths) if b is not None):
        pending.append(bucket)
        budget = max(1, tokens_per_batch // BOUNDARIES[bucket])
        while len(pending) >= budget:
            batches.append((budget, BOUNDARIES[max(pending[:budget])]))
            pending = pending[budget:]
    if pending:
        batches.append((len(pending), BOUNDARIES[pending[-1]]))
    return sorted(batches)


@pytest.mark.parametrize("tokens_per_batch", [7, 64, 1000])
def test_every_kept_pair_once_per_epoch_within_its_batch_width(tokens_per_batch):
    lengths = lengths_of(500)
    plan = BatchPlan(lengths, BOUNDARIES, tokens_per_batch, seed=3)
    kept = [i for i, length in enumerate(lengths) if reference_bucket(length) is not None]
    assert plan.num_pairs == len(kept) and plan.left_out == 500 - len(kept)
    for epoch in range(2):
        seen = []
        for pair_ids, width in epoch_batches(plan, epoch):
            # The batch is padded to the boundary of its longest pair.
            assert max(reference_bucket(lengths[i]) for i in pair_ids) == BOUNDARIES.index(width)
            assert 1 <= len(pair_ids) <= max(1, tokens_per_batch // width)
            seen.extend(pair_ids.tolist())
        assert sorted(seen) == kept


@pytest.mark.parametrize("tokens_per_batch", [7, 128, 1000])
def test_batches_are_cut_as_the_reference_cuts_them(tokens_per_batch):
    lengths = lengths_of(2000, seed=1)
    plan = BatchPlan(lengths, BOUNDARIES, tokens_per_batch, seed=0)
    batches = epoch_batches(plan, 0)
    # Below the budget of their width: the epoch's last, and at a bucket's end pairs carried over that fill
    # the next, longer bucket's smaller budget on their own (padded to their own width).
    partial = [len(ids) for ids, width in batches if len(ids) < max(1, tokens_per_batch // width)]
    assert len(partial) <= len(BOUNDARIES)
    assert sorted((len(ids), width) for ids, width in batches) == reference_batches(lengths, tokens_per_batch)
    assert plan.steps_per_epoch == len(reference_batches(lengths, tokens_per_batch))


def test_the_plan_is_a_function_of_its_arguments():
    lengths = lengths_of(300)
    first, second = BatchPlan(lengths, BOUNDARIES, 64, seed=5), BatchPlan(lengths, BOUNDARIES, 64, seed=5)
    # A fresh plan asked first for a step in the middle of epoch 1 (a resumed run) gives, to past the
    # start of epoch 2, what the first one gives in sequence from step 0: no epoch's order depends on
    # the epochs a process has planned before it.
    steps = first.steps_per_epoch
    resumed_at, end = steps + steps // 2, 2 * steps + 5
    late = [second.batch(step) for step in range(resumed_at, end)]
    in_order = [first.batch(step) for step in range(end)][resumed_at:]
    assert len(late) == len(in_order) == end - resumed_at
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


# The batches of shares 3, 4 and 5 of six (host 1 of 2, three replicas) over 3 epochs, lengths of
# `lengths_of`-style seed 7, 803 pairs, tokens_per_batch 96, seed 2: digested from the plans of
# before one plan served a host's replicas, one `BatchPlan(num_workers=6, worker=w)` per replica
# (147 batches to deal, so the halving of batches is in it too).
PER_REPLICA_DIGEST = "f86f790d9335cc23d71ab3e77debca39c67e09dc7da00822d422aa5afcecec3f"


def test_one_plan_shared_by_a_hosts_replicas_gives_each_the_batches_of_its_own_plan():
    import hashlib

    lengths = np.random.default_rng(7).integers(2, 40, size=803)
    shared = BatchPlan(lengths, [4, 8, 16, 32], 96, seed=2, num_workers=6, shares=range(3, 6))
    digest = hashlib.sha256()
    for step in range(3 * shared.steps_per_epoch):
        for share in shared.shares:
            ids, width = shared.batch(step, share)
            digest.update(np.asarray(ids, "<i8").tobytes())
            digest.update(str(width).encode())
    assert digest.hexdigest() == PER_REPLICA_DIGEST
    with pytest.raises(ValueError, match="share 0 is not one of"):
        shared.batch(0, 0)


def test_workers_take_turns_at_the_batches_of_the_one_worker_plan():
    """Dealt in turns: with a batch count that W divides, share w's step p is the single plan's
    batch p * W + w of the epoch."""
    lengths, workers = lengths_of(606, seed=4), 3
    single = BatchPlan(lengths, BOUNDARIES, 200, seed=3)
    assert single.batches_per_epoch == 57  # three workers' turns, no batch halved
    shared = BatchPlan(lengths, BOUNDARIES, 200, seed=3, num_workers=workers, shares=range(workers))
    for epoch in range(2):
        for position in range(shared.steps_per_epoch):
            for share in range(workers):
                ids, width = shared.batch(epoch * shared.steps_per_epoch + position, share)
                expected_ids, expected_width = single.batch(epoch * single.steps_per_epoch + position * workers
                                                            + share)
                assert ids.tolist() == expected_ids.tolist() and width == expected_width


def test_the_next_epoch_is_computed_ahead_and_only_two_are_held():
    lengths = lengths_of(300, seed=5)
    plan, unhurried = BatchPlan(lengths, BOUNDARIES, 96, seed=1), BatchPlan(lengths, BOUNDARIES, 96, seed=1,
                                                                            ahead=False)
    plan.batch(0)
    assert sorted(plan._epochs) == [0, 1] and sorted(unhurried._epochs) == []
    plan._epochs[1].result(timeout=30)  # computed in the background
    for epoch in range(4):
        assert epoch_batches(plan, epoch)[-1][0].tolist() == epoch_batches(unhurried, epoch)[-1][0].tolist()
        assert sorted(plan._epochs) == [epoch, epoch + 1]
