"""`tf.data` input pipeline: strings in, token-budget batches out.

Batches follow the project's training convention:
`({"source": source + [eos], "target": [bos] + y}, y + [eos])`, int32,
padded with pad id 0. Pairs are grouped by length into buckets and each
bucket's batch size is `tokens_per_batch // bucket_boundary`, so a batch holds
at most about `tokens_per_batch` padded tokens (counting the longer of source
and target). Padding to the bucket boundary keeps the number of distinct
shapes small, which matters for XLA/JAX compilation. Keras 3 accepts these
datasets in `model.fit` under every backend.
"""

import collections.abc

import numpy as np
import tensorflow as tf

from keras_transformer.data.special_tokens import BOS_ID, EOS_ID
from keras_transformer.data.bucketing import (  # noqa: F401  (default_bucket_boundaries: API)
    Buckets, bucket_and_batch, check_positive_int, default_bucket_boundaries,
)

DEFAULT_SHUFFLE_BUFFER_SIZE = 100_000
_ON_LONG = ("drop", "truncate")


class PipelineStats:
    """Counters of what the length limit did to the pairs.

    Pass one as `stats=` to `make_dataset` / `make_id_dataset`, then read
    `result()`. `examples`: tokenized pairs seen; `dropped_long`: pairs over
    `max_length` that were dropped; `truncated`: pairs that were truncated.
    Pairs are counted when they are tokenized: once if the pipeline caches
    ids (the default for in-memory data, counted while the dataset is built),
    at every epoch otherwise. Counting adds TensorFlow variables to the input
    pipeline, which distribution strategies may refuse to copy: leave it off
    there.
    """

    def __init__(self):
        self.examples = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.dropped_long = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.truncated = tf.Variable(0, dtype=tf.int64, trainable=False)

    def result(self):
        return {
            "examples": int(self.examples.numpy()),
            "dropped_long": int(self.dropped_long.numpy()),
            "truncated": int(self.truncated.numpy()),
        }

    def reset(self):
        for variable in (self.examples, self.dropped_long, self.truncated):
            variable.assign(0)

    def __str__(self):
        result = self.result()
        return (
            f"{result['examples']} pairs, {result['dropped_long']} dropped "
            f"and {result['truncated']} truncated for length"
        )


def _pairs_to_string_dataset(data):
    """A dataset of `(source, target)` scalar strings from the input."""
    if isinstance(data, tf.data.Dataset):
        spec = data.element_spec
        if isinstance(spec, dict):
            if set(spec) != {"source", "target"}:
                raise ValueError(
                    f"a dataset of dicts must have keys 'source' and "
                    f"'target', got {sorted(spec)}"
                )
            data = data.map(lambda element: (element["source"], element["target"]))
            spec = data.element_spec
        if not (
            isinstance(spec, tuple)
            and len(spec) == 2
            and all(
                isinstance(s, tf.TensorSpec)
                and s.dtype == tf.string
                and s.shape.rank == 0
                for s in spec
            )
        ):
            raise ValueError(
                f"data must yield (source, target) scalar strings; its "
                f"element_spec is {spec}"
            )
        return data
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        sources, targets = [], []
        for index, pair in enumerate(data):
            if (
                not isinstance(pair, (tuple, list))
                or len(pair) != 2
                or not all(isinstance(side, (str, bytes)) for side in pair)
            ):
                raise ValueError(
                    f"data[{index}] must be a (source, target) pair of "
                    f"strings, got {pair!r:.80}"
                )
            sources.append(pair[0])
            targets.append(pair[1])
        if not sources:
            raise ValueError("data holds no (source, target) pair")
        return tf.data.Dataset.from_tensor_slices(
            (
                tf.constant(sources, dtype=tf.string, shape=[len(sources)]),
                tf.constant(targets, dtype=tf.string, shape=[len(targets)]),
            )
        )
    if isinstance(data, collections.abc.Iterable):
        # A re-iterable stream such as a ParallelCorpus: read lazily, once per
        # epoch. (A one-shot generator would only serve the first epoch.)
        if iter(data) is data:
            raise ValueError(
                "data is a one-shot iterator; pass a list, a ParallelCorpus "
                "or a tf.data.Dataset so that every epoch can read it"
            )
        return tf.data.Dataset.from_generator(
            lambda: iter(data),
            output_signature=(
                tf.TensorSpec([], tf.string),
                tf.TensorSpec([], tf.string),
            ),
        )
    raise TypeError(
        f"data must be a list of (source, target) pairs, an iterable of "
        f"pairs or a tf.data.Dataset, got {type(data).__name__}"
    )


def _id_pairs_to_dataset(id_pairs):
    if isinstance(id_pairs, tf.data.Dataset):
        return id_pairs.map(
            lambda source, target: (
                tf.cast(source, tf.int32),
                tf.cast(target, tf.int32),
            )
        )
    sources, targets = [], []
    for index, pair in enumerate(id_pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(
                f"id_pairs[{index}] must be a (source_ids, target_ids) pair"
            )
        sources.append(np.asarray(pair[0], dtype=np.int32).reshape(-1))
        targets.append(np.asarray(pair[1], dtype=np.int32).reshape(-1))
    if not sources:
        raise ValueError("id_pairs is empty")

    def to_ragged(rows):
        # tf.ragged.constant walks Python lists one by one: far too slow here.
        lengths = np.array([len(row) for row in rows], dtype=np.int64)
        return tf.RaggedTensor.from_row_lengths(np.concatenate(rows), lengths)

    return tf.data.Dataset.from_tensor_slices(
        (to_ragged(sources), to_ragged(targets))
    ).map(
        lambda source, target: (
            tf.reshape(source, [-1]),
            tf.reshape(target, [-1]),
        )
    )


def _check_options(tokens_per_batch, max_length, on_long, shuffle_buffer_size):
    check_positive_int("tokens_per_batch", tokens_per_batch)
    check_positive_int("max_length", max_length)
    if max_length < 2:
        raise ValueError(
            f"max_length must be >= 2 (one token plus bos/eos), got {max_length}"
        )
    if on_long not in _ON_LONG:
        raise ValueError(f"on_long must be one of {_ON_LONG}, got {on_long!r}")
    if shuffle_buffer_size is not None:
        check_positive_int("shuffle_buffer_size", shuffle_buffer_size)


def _prepare_pairs(
    dataset, *, bos_id, eos_id, max_length, on_long, stats, num_parallel_calls
):
    """Raw id pairs to `(source + eos, bos + target, target + eos)`.

    Pairs longer than `max_length` (counting the added token) are dropped or
    truncated, and counted in `stats` if given.
    """

    def too_long(source, target):
        return tf.maximum(tf.size(source), tf.size(target)) + 1 > max_length

    if stats is not None:

        def count(source, target):
            is_long = tf.cast(too_long(source, target), tf.int64)
            counter = stats.dropped_long if on_long == "drop" else stats.truncated
            with tf.control_dependencies(
                [stats.examples.assign_add(1), counter.assign_add(is_long)]
            ):
                return tf.identity(source), tf.identity(target)

        # Sequential on purpose: the counters are updated in place.
        dataset = dataset.map(count)

    if on_long == "drop":
        dataset = dataset.filter(
            lambda source, target: tf.logical_not(too_long(source, target))
        )

    def add_specials(source, target):
        if on_long == "truncate":
            source = source[: max_length - 1]
            target = target[: max_length - 1]
        eos = tf.constant([eos_id], tf.int32)
        bos = tf.constant([bos_id], tf.int32)
        return (
            tf.concat([source, eos], 0),
            tf.concat([bos, target], 0),
            tf.concat([target, eos], 0),
        )

    return dataset.map(add_specials, num_parallel_calls=num_parallel_calls)


def _shuffle_and_repeat(dataset, shuffle, shuffle_buffer_size, seed, repeat):
    if shuffle:
        dataset = dataset.shuffle(
            shuffle_buffer_size or DEFAULT_SHUFFLE_BUFFER_SIZE,
            seed=seed,
            reshuffle_each_iteration=True,
        )
    if repeat:
        dataset = dataset.repeat()
    return dataset


def _check_count_batches(count_batches, default, repeat):
    if count_batches is None:
        return default and not repeat
    if count_batches and repeat:
        raise ValueError("count_batches=True needs repeat=False")
    return bool(count_batches)


def make_dataset(
    data,
    tokenizer,
    *,
    tokens_per_batch=25000,
    max_length=256,
    on_long="drop",
    bucket_boundaries=None,
    pad_to_bucket_boundary=True,
    training=True,
    shuffle=None,
    shuffle_buffer_size=None,
    seed=None,
    repeat=False,
    drop_remainder=False,
    stats=None,
    cache=None,
    count_batches=None,
    tokenize_batch_size=256,
    num_parallel_calls=tf.data.AUTOTUNE,
):
    """Token-budget batches of tokenized pairs for `model.fit`.

    Args:
        data: a list of `(source, target)` strings, a re-iterable of pairs
            (e.g. a `ParallelCorpus`, read lazily each epoch), or a
            `tf.data.Dataset` yielding `(source, target)` scalar strings or
            dicts with keys `"source"` and `"target"`.
        tokenizer: a `SubwordTokenizer` (or anything with `tokenize`,
            `bos_id`, `eos_id`); tokenization runs in the TF graph.
        tokens_per_batch: token budget of a batch: batch size times padded
            length (the longer of source and target) stays within it, unless
            one pair alone exceeds it (then the batch holds that pair).
        max_length: longest sequence allowed, counting eos (source, labels) or
            bos (decoder input).
        on_long: `"drop"` or `"truncate"` pairs over `max_length`.
        bucket_boundaries: increasing padded lengths; a pair goes to the
            smallest boundary >= its length. Default:
            `default_bucket_boundaries(max_length)`.
        pad_to_bucket_boundary: pad every batch to its bucket boundary (few
            distinct shapes); if False, pad to the longest in the batch.
        training: if True, shuffle by default.
        shuffle: shuffle pairs (default: `training`).
        shuffle_buffer_size: default 100,000 pairs (a full shuffle of smaller
            corpora).
        seed: shuffle seed; with a seed the batches are deterministic.
        repeat: repeat forever (reshuffled every pass); give `model.fit` a
            `steps_per_epoch`.
        drop_remainder: drop the last, partial batch of each bucket (fixed
            batch sizes for compilers; those pairs are lost for that pass).
        stats: an optional `PipelineStats` to count dropped/truncated pairs.
        cache: keep the token ids in memory after the first pass, so later
            epochs skip tokenization (default: True when `data` is a list or
            tuple, which is in memory anyway; False for streams).
        count_batches: count the batches of an epoch when the dataset is
            built (one pass over the data) and declare that cardinality, so
            `model.fit` knows the epoch length; needs `repeat=False`.
            Default: `cache and not repeat`.
        tokenize_batch_size: strings tokenized per TF op call.

    Returns:
        A `tf.data.Dataset` of
        `({"source": int32 (B, S), "target": int32 (B, T)}, int32 (B, T))`.
    """
    _check_options(tokens_per_batch, max_length, on_long, shuffle_buffer_size)
    check_positive_int("tokenize_batch_size", tokenize_batch_size)
    buckets = Buckets(bucket_boundaries, max_length, tokens_per_batch)
    if shuffle is None:
        shuffle = training
    if cache is None:
        cache = isinstance(data, (list, tuple))
    count_batches = _check_count_batches(count_batches, cache, repeat)
    strings = _pairs_to_string_dataset(data)

    def tokenize(sources, targets):
        return tokenizer.tokenize(sources), getattr(tokenizer, "tokenize_target", tokenizer.tokenize)(targets)

    def tokenize_and_prepare(dataset, stats):
        ids = (
            dataset.batch(tokenize_batch_size)
            .map(tokenize, num_parallel_calls=num_parallel_calls)
            .unbatch()
            .map(
                lambda source, target: (
                    tf.reshape(source, [-1]),
                    tf.reshape(target, [-1]),
                )
            )
        )
        return _prepare_pairs(
            ids,
            bos_id=tokenizer.bos_id,
            eos_id=tokenizer.eos_id,
            max_length=max_length,
            on_long=on_long,
            stats=stats,
            num_parallel_calls=num_parallel_calls,
        )

    num_batches = None
    if cache:
        # Tokenize once; later epochs read ids from memory and shuffle them.
        prepared = tokenize_and_prepare(strings, stats).cache()
        if count_batches:
            # This pass fills the cache (and counts `stats` once).
            num_batches = buckets.count_batches(prepared, drop_remainder)
        prepared = _shuffle_and_repeat(
            prepared, shuffle, shuffle_buffer_size, seed, repeat
        )
    else:
        if count_batches:
            num_batches = buckets.count_batches(
                tokenize_and_prepare(strings, None), drop_remainder
            )
        # Shuffling strings before tokenization is cheaper than shuffling ids.
        prepared = tokenize_and_prepare(
            _shuffle_and_repeat(strings, shuffle, shuffle_buffer_size, seed, repeat),
            stats,
        )
    return bucket_and_batch(
        prepared,
        buckets,
        pad_to_bucket_boundary=pad_to_bucket_boundary,
        drop_remainder=drop_remainder,
        num_batches=num_batches,
    )


def make_id_dataset(
    id_pairs,
    *,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    tokens_per_batch=25000,
    max_length=256,
    on_long="drop",
    bucket_boundaries=None,
    pad_to_bucket_boundary=True,
    training=True,
    shuffle=None,
    shuffle_buffer_size=None,
    seed=None,
    repeat=False,
    drop_remainder=False,
    stats=None,
    count_batches=None,
    num_parallel_calls=tf.data.AUTOTUNE,
):
    """Like `make_dataset`, for pairs that are already token ids.

    `id_pairs` is a list of `(source_ids, target_ids)` integer sequences
    without bos/eos (e.g. a synthetic copy task), or a `tf.data.Dataset` of
    such 1-D int tensors. Ids must avoid pad (0), bos and eos. The prepared
    ids are cached in memory; `count_batches` defaults to `not repeat`.
    """
    _check_options(tokens_per_batch, max_length, on_long, shuffle_buffer_size)
    buckets = Buckets(bucket_boundaries, max_length, tokens_per_batch)
    if shuffle is None:
        shuffle = training
    count_batches = _check_count_batches(count_batches, True, repeat)
    prepared = _prepare_pairs(
        _id_pairs_to_dataset(id_pairs),
        bos_id=bos_id,
        eos_id=eos_id,
        max_length=max_length,
        on_long=on_long,
        stats=stats,
        num_parallel_calls=num_parallel_calls,
    ).cache()
    num_batches = None
    if count_batches:
        num_batches = buckets.count_batches(prepared, drop_remainder)
    prepared = _shuffle_and_repeat(prepared, shuffle, shuffle_buffer_size, seed, repeat)
    return bucket_and_batch(
        prepared,
        buckets,
        pad_to_bucket_boundary=pad_to_bucket_boundary,
        drop_remainder=drop_remainder,
        num_batches=num_batches,
    )
