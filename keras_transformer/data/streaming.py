"""Training batches streamed from prepared shards, from any step on.

`stream_batches(shards, plan, start_step)` is a `tf.data.Dataset` of the
batches of steps `start_step, start_step + 1, ...` forever (one epoch after
another), in the training convention of `pipeline.make_dataset`:
`({"source": int32 (B, W), "target": int32 (B, W)}, int32 (B, W))`, each
batch padded to its bucket's length. `model.fit` takes it on every Keras
backend. Memory does not grow with the corpus: a batch is read from the
shards when it is due (see `shards`).
"""

import tensorflow as tf

_SPEC = (
    {"source": tf.TensorSpec([None, None], tf.int32), "target": tf.TensorSpec([None, None], tf.int32)},
    tf.TensorSpec([None, None], tf.int32),
)


def stream_batches(shards, plan, start_step=0):
    """The batches of `plan` (a `BatchPlan`) from step `start_step` on, read from `shards` (a `ShardSet`).

    `plan` may be a list of plans (the shares of a worker's local replicas):
    each step then yields one batch of each, in order, as
    `tf.distribute`'s `distribute_datasets_from_function` hands them out."""
    if start_step < 0:
        raise ValueError(f"start_step must be >= 0, got {start_step}")
    plans = plan if isinstance(plan, (list, tuple)) else [plan]

    def generate():
        step = start_step
        while True:
            for share in plans:
                pair_ids, width = share.batch(step)
                source, decoder_input, labels = shards.batch(pair_ids, width)
                yield {"source": source, "target": decoder_input}, labels
            step += 1

    dataset = tf.data.Dataset.from_generator(generate, output_signature=_SPEC)
    options = tf.data.Options()
    # Each worker's generator yields that worker's own batches (the plan
    # deals them out): tf.distribute must not shard them again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options).prefetch(2)
