"""Which pairs make up the batch of each training step: a function of the step.

The order is computed, not replayed. For an epoch `e` the plan shuffles the
pairs with a generator seeded by `(seed, e)`, sorts them by length bucket
(each bucket's pairs in that random order), cuts the sorted pairs into
batches of the token budget and shuffles the batches. A bucket's last,
partial batch is filled up with the next bucket's pairs (padded to the
longer boundary), so every batch is full but the epoch's last: with
hundreds of narrow buckets over a small corpus, batches cut bucket by bucket
would mostly be partial ones, and each step would learn from far fewer
tokens than `tokens_per_batch` (a streamed, repeated `tf.data`
`group_by_window` fills them across epochs). So:

- the shuffle is global (every pair can meet every other pair of its bucket,
  unlike a bounded shuffle buffer over a stream);
- the batch of step `s` is known without producing the batches before it: a
  run resumed at step 100,000 starts there at once (`tf.data`'s `skip(n)`
  would make the n batches first);
- `num_workers` workers take turns (worker `w` gets the epoch's batches `w`,
  `w + W`, ...): each pair is read by one worker once per epoch. When the
  batch count is not a multiple of W, the first batches of more than one
  pair are halved until it is, so that no worker repeats or skips a pair.
- one plan serves all the shares a host reads (its local replicas, `shares`):
  the epoch's permutation is computed and held once per host, not once per
  replica, and the next epoch's is computed ahead in a background thread, so
  that an epoch boundary does not stall the input.

Pure NumPy: no TensorFlow, the same on every backend.
"""

import concurrent.futures
import hashlib
import threading

import numpy as np


class BatchPlan:
    """The batches of every step of a training run over prepared pairs.

    Args:
        lengths: per pair, the padded length it needs: the longer of its
            source and target, plus one (eos / bos).
        boundaries: increasing bucket lengths; a pair goes to the smallest
            boundary >= its length.
        max_length: pairs longer than this (default: the last boundary)
            are left out (`left_out` counts them).
        tokens_per_batch: token budget: a batch padded to `boundary` holds
            `max(1, tokens_per_batch // boundary)` pairs (the epoch's last
            one fewer).
        seed: the shuffle seed.
        num_workers, worker: the number of shares and this process's share
            (see the module docstring).
        shares: instead of `worker`, the shares this process reads (a host's
            local replicas); `batch(step, share)` gives each.
        ahead: compute the next epoch's order in a background thread.
    """

    def __init__(self, lengths, boundaries, tokens_per_batch, seed=0, num_workers=1, worker=0, max_length=None,
                 shares=None, ahead=True):
        lengths = np.asarray(lengths)
        self.boundaries = np.asarray(boundaries, np.int64)
        if self.boundaries.ndim != 1 or not len(self.boundaries) or np.any(np.diff(self.boundaries) <= 0):
            raise ValueError(f"boundaries must be increasing, got {boundaries!r}")
        self.shares = tuple(int(share) for share in ([worker] if shares is None else shares))
        if not self.shares or not all(0 <= share < num_workers for share in self.shares):
            raise ValueError(f"worker and shares must lie in [0, {num_workers}), got "
                             f"{worker if shares is None else shares!r}")
        self.tokens_per_batch, self.max_length = int(tokens_per_batch), max_length
        self.batch_sizes = np.maximum(1, int(tokens_per_batch) // self.boundaries)
        self.seed, self.num_workers, self.worker = int(seed), int(num_workers), self.shares[0]
        bucket = np.searchsorted(self.boundaries, lengths, side="left")
        if max_length is not None:
            bucket[lengths > max_length] = len(self.boundaries)
        self._bucket = bucket.astype(np.int16 if len(self.boundaries) < 2**15 else np.int32)
        id_type = np.int32 if len(lengths) < 2**31 else np.int64
        self._kept = np.flatnonzero(bucket < len(self.boundaries)).astype(id_type)
        self.left_out = len(lengths) - len(self._kept)
        counts = np.bincount(bucket[self._kept], minlength=len(self.boundaries))
        starts, ends, _ = self._cut(counts)
        self.batches_per_epoch = len(starts)
        splits = -self.batches_per_epoch % self.num_workers
        splittable = int(np.sum(ends - starts > 1))
        if splits > splittable:
            raise ValueError(
                f"{self.batches_per_epoch} batches of {len(self._kept)} pairs cannot be dealt evenly to "
                f"{num_workers} workers; use more data or fewer workers")
        self.steps_per_epoch = (self.batches_per_epoch + splits) // self.num_workers
        self.ahead = ahead
        self._epochs = {}  # epoch -> Future of its (order, starts, ends, widths): this one and the next
        self._lock = threading.Lock()

    @property
    def num_pairs(self):
        """Pairs in an epoch (those that fit the last boundary)."""
        return len(self._kept)

    def record(self):
        """Every input that decides the plan's batches, as JSON values: a run resumed with
        another record would train some pairs of the epoch twice and others not at all.

        The worker's own share is left out (the shares together make one plan, whichever
        process reads which); `epoch_0_sha256` digests the first pair ids of epoch 0, which
        also changes with NumPy's permutation stream."""
        first = self._epoch(0, ahead=False)[0][:4096].astype("<i8")
        return {
            "boundaries": self.boundaries.tolist(),
            "tokens_per_batch": self.tokens_per_batch,
            "max_length": None if self.max_length is None else int(self.max_length),
            "seed": self.seed,
            "shares": self.num_workers,
            "pairs": self.num_pairs,
            "steps_per_epoch": self.steps_per_epoch,
            "epoch_0_sha256": hashlib.sha256(first.tobytes()).hexdigest(),
        }

    def _epoch(self, epoch, ahead=True):
        """`(order, starts, ends, widths)` of all the batches of `epoch` (every share's),
        held for this epoch and the next (computed ahead in the background)."""
        with self._lock:
            future = self._epochs.get(epoch)
            if future is None:
                future = self._epochs[epoch] = concurrent.futures.Future()
                self._compute(epoch, future)  # under the lock: another thread wanting it waits anyway
            if ahead and self.ahead and epoch + 1 not in self._epochs:
                following = self._epochs[epoch + 1] = concurrent.futures.Future()
                threading.Thread(target=self._compute, args=(epoch + 1, following), daemon=True,
                                 name=f"batch plan of epoch {epoch + 1}").start()
            if ahead:
                for old in [e for e in self._epochs if e not in (epoch, epoch + 1)]:
                    del self._epochs[old]
        return future.result()

    def _compute(self, epoch, future):
        try:
            future.set_result(self._order(epoch))
        except BaseException as error:  # noqa: B036  (handed to whoever waits for the epoch)
            future.set_exception(error)

    def _order(self, epoch):
        rng = np.random.default_rng([self.seed, epoch])
        shuffled = self._kept[rng.permutation(len(self._kept))]
        order = shuffled[np.argsort(self._bucket[shuffled], kind="stable")]
        del shuffled
        starts, ends, widths = self._cut(np.bincount(self._bucket[order], minlength=len(self.boundaries)))
        shuffle = rng.permutation(len(starts))
        starts, ends, widths = starts[shuffle], ends[shuffle], widths[shuffle]
        return (order, *self._even_out(starts, ends, widths))

    def _cut(self, counts):
        """`(starts, ends, widths)` of the batches over pairs sorted by bucket,
        `counts[b]` of them in bucket `b`: batches of bucket `b`'s budget
        while its pairs come; the pairs left over at the end of a bucket open
        the next bucket's first batch."""
        starts = []
        position, end = 0, 0
        for bucket in range(len(self.boundaries)):
            end += int(counts[bucket])
            size = int(self.batch_sizes[bucket])
            full = (end - position) // size
            starts.append(position + size * np.arange(full, dtype=np.int64))
            position += full * size
        if position < end:  # the epoch's last batch, partial
            starts.append(np.array([position], np.int64))
        starts = np.concatenate(starts)
        ends = np.append(starts[1:], end).astype(np.int64)[:len(starts)]
        # Padded to the boundary of its longest pair (a batch of pairs carried over from shorter
        # buckets holds fewer pairs than their own budget, so it stays within the budget).
        last_bucket = np.searchsorted(np.cumsum(counts), ends - 1, side="right")
        return starts, ends, self.boundaries[last_bucket] if len(starts) else np.zeros(0, np.int64)

    def _even_out(self, starts, ends, widths):
        """Halves the first batches of two or more pairs until the count is a
        multiple of the number of workers."""
        splits = -len(starts) % self.num_workers
        if not splits:
            return starts, ends, widths
        halved = np.flatnonzero(ends - starts > 1)[:splits]
        middles = (starts[halved] + ends[halved]) // 2
        new_starts = np.insert(starts, halved + 1, middles)
        new_ends = np.insert(ends, halved + 1, ends[halved])
        new_ends[halved + np.arange(len(halved))] = middles
        return new_starts, new_ends, np.insert(widths, halved + 1, widths[halved])

    def batch(self, step, share=None):
        """`(pair ids, width)` of share `share`'s batch (default: `worker`'s) at training step
        `step` (counted from 0 over all epochs)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        share = self.worker if share is None else int(share)
        if share not in self.shares:
            raise ValueError(f"share {share} is not one of this plan's {self.shares}")
        epoch, position = divmod(int(step), self.steps_per_epoch)
        order, starts, ends, widths = self._epoch(epoch)
        batch = position * self.num_workers + share
        return order[starts[batch]:ends[batch]], int(widths[batch])
