"""Length buckets and token-budget batches for the `tf.data` pipeline.

Pairs are grouped by length into buckets, and each bucket's batch size is
`tokens_per_batch // bucket_boundary`, so a batch holds at most about
`tokens_per_batch` padded tokens; padding to the bucket boundary keeps the
number of distinct shapes small (XLA/JAX compile once per shape).
`keras_transformer.data.pipeline` builds its datasets with these.
"""

import math

import numpy as np
import tensorflow as tf

from keras_transformer.data.special_tokens import PAD_ID


def check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_boundaries(bucket_boundaries, max_length):
    if bucket_boundaries is None:
        return default_bucket_boundaries(max_length)
    boundaries = list(bucket_boundaries)
    if not boundaries:
        raise ValueError("bucket_boundaries must not be empty")
    for value in boundaries:
        check_positive_int("bucket_boundaries entries", value)
    if any(b <= a for a, b in zip(boundaries, boundaries[1:])):
        raise ValueError(
            f"bucket_boundaries must be strictly increasing, got {boundaries}"
        )
    if boundaries[-1] < max_length:
        raise ValueError(
            f"the last of bucket_boundaries ({boundaries[-1]}) must be >= "
            f"max_length ({max_length}), or the longest pairs fit no bucket"
        )
    return [int(value) for value in boundaries]


def default_bucket_boundaries(max_length, *, min_boundary=8, growth=1.2, multiple=8):
    """Bucket boundaries: multiples of `multiple` growing by about `growth`.

    The last boundary is `max_length` rounded up to `multiple`, so every pair
    allowed by `max_length` fits. For `max_length=256`:
    `[8, 16, 24, 32, 40, 48, 64, 80, 96, 120, 144, 176, 216, 256]`.
    `growth=1` gives evenly spaced boundaries, one every `multiple` tokens.
    """
    check_positive_int("max_length", max_length)
    check_positive_int("min_boundary", min_boundary)
    check_positive_int("multiple", multiple)
    if not growth >= 1:
        raise ValueError(f"growth must be >= 1, got {growth!r}")

    def round_up(value):
        return int(math.ceil(value / multiple) * multiple)

    last = round_up(max_length)
    boundaries = []
    boundary = round_up(min_boundary)
    while boundary < last:
        boundaries.append(boundary)
        boundary = max(boundary + multiple, round_up(boundary * growth))
    boundaries.append(last)
    return boundaries


class Buckets:
    """Bucket boundaries and the batch size of each bucket."""

    def __init__(self, bucket_boundaries, max_length, tokens_per_batch):
        self.boundaries = check_boundaries(bucket_boundaries, max_length)
        self.batch_sizes = [
            max(1, tokens_per_batch // boundary) for boundary in self.boundaries
        ]
        self.boundaries_tensor = tf.constant(self.boundaries, dtype=tf.int64)
        self.batch_sizes_tensor = tf.constant(self.batch_sizes, dtype=tf.int64)

    def of_length(self, length):
        """Index of the smallest boundary >= length."""
        return tf.reduce_sum(
            tf.cast(self.boundaries_tensor < tf.cast(length, tf.int64), tf.int64)
        )

    def of_triple(self, source, target_in, labels):
        # Decoder input and labels have the same length.
        return self.of_length(tf.maximum(tf.size(source), tf.size(labels)))

    def count_batches(self, prepared, drop_remainder):
        """Batches in one pass over `prepared` triples (reads it once)."""
        size = len(self.boundaries)
        pairs_per_bucket = (
            prepared.map(self.of_triple)
            .reduce(
                tf.zeros([size], tf.int64),
                lambda counts, bucket: counts
                + tf.one_hot(bucket, size, dtype=tf.int64),
            )
            .numpy()
            .tolist()
        )
        return sum(
            count // batch if drop_remainder else -(-count // batch)
            for count, batch in zip(pairs_per_bucket, self.batch_sizes)
        )


def bucket_and_batch(
    prepared, buckets, *, pad_to_bucket_boundary, drop_remainder, num_batches
):
    """Groups prepared triples by length into padded, token-budget batches."""

    def batch_bucket(bucket, window):
        if pad_to_bucket_boundary:
            shape = tf.reshape(buckets.boundaries_tensor[bucket], [1])
        else:
            shape = tf.constant([-1], tf.int64)
        pad = tf.constant(PAD_ID, tf.int32)
        return window.padded_batch(
            buckets.batch_sizes_tensor[bucket],
            padded_shapes=(shape, shape, shape),
            padding_values=(pad, pad, pad),
        )

    dataset = prepared.group_by_window(
        key_func=buckets.of_triple,
        reduce_func=batch_bucket,
        window_size_func=lambda bucket: buckets.batch_sizes_tensor[bucket],
    )
    if drop_remainder:

        def is_full(source, target_in, labels):
            # The longest row of a batch lies in the batch's bucket.
            bucket = buckets.of_length(
                tf.maximum(tf.shape(source)[1], tf.shape(labels)[1])
            )
            return tf.equal(
                tf.cast(tf.shape(source)[0], tf.int64),
                buckets.batch_sizes_tensor[bucket],
            )

        dataset = dataset.filter(is_full)

    dataset = dataset.map(
        lambda source, target_in, labels: (
            {"source": source, "target": target_in},
            labels,
        )
    )
    if num_batches is not None:
        # A known length lets Keras show progress and end epochs cleanly.
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    return dataset.prefetch(tf.data.AUTOTUNE)
