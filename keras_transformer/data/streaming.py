"""Training batches streamed from prepared shards, from any step on.

`stream_batches(shards, plan, start_step)` is a `tf.data.Dataset` of the
batches of steps `start_step, start_step + 1, ...` forever (one epoch after
another), in the training convention of `pipeline.make_dataset`:
`({"source": int32 (B, W), "target": int32 (B, W)}, int32 (B, W))`, each
batch padded to its bucket's length. `model.fit` takes it on every Keras
backend. Memory does not grow with the corpus: a batch is read from the
shards shortly before it is due (see `shards`), by a few reader threads
working on the next batches at once (`os.pread` and NumPy's copies run
outside the GIL, so a cold page cache is read with several requests in
flight rather than one).
"""

import collections
import multiprocessing.pool

import tensorflow as tf

_SPEC = (
    {"source": tf.TensorSpec([None, None], tf.int32), "target": tf.TensorSpec([None, None], tf.int32)},
    tf.TensorSpec([None, None], tf.int32),
)


def stream_batches(shards, plan, start_step=0, readers=4):
    """The batches of `plan` (a `BatchPlan`) from step `start_step` on, read from `shards` (a `ShardSet`)
    by `readers` threads, up to `2 * readers` batches ahead.

    Each step yields one batch of each of the plan's `shares` (a host's local replicas), in order, as
    `tf.distribute`'s `distribute_datasets_from_function` hands them out."""
    if start_step < 0:
        raise ValueError(f"start_step must be >= 0, got {start_step}")

    def read(step, share):
        pair_ids, width = plan.batch(step, share)
        source, decoder_input, labels = shards.batch(pair_ids, width)
        return {"source": source, "target": decoder_input}, labels

    def due():
        step = start_step
        while True:
            for share in plan.shares:
                yield step, share
            step += 1

    def generate():
        # Daemon threads: a stream left unfinished (its dataset never closed) does not keep the
        # interpreter from exiting, as ThreadPoolExecutor's threads would.
        pool = multiprocessing.pool.ThreadPool(readers)
        pending = collections.deque()
        try:
            for step, share in due():
                pending.append(pool.apply_async(read, (step, share)))
                if len(pending) > 2 * readers:
                    yield pending.popleft().get()
        finally:  # the consumer stopped: what was read ahead is dropped
            pool.terminate()

    dataset = tf.data.Dataset.from_generator(generate, output_signature=_SPEC)
    options = tf.data.Options()
    # Each worker's generator yields that worker's own batches (the plan
    # deals them out): tf.distribute must not shard them again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options).prefetch(2)
