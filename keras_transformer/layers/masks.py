"""Boolean attention masks derived from pad ids (True = may attend)."""

from keras import ops

from keras_transformer.data.special_tokens import PAD_ID


def padding_mask(ids, pad_id=PAD_ID):
    """(batch, length) -> (batch, 1, length): keys that are real tokens."""
    return ops.expand_dims(ops.not_equal(ids, pad_id), axis=1)


def causal_mask(query_length, key_length=None, offset=0):
    """(query_length, key_length): query i may attend to keys 0..offset+i.

    `offset` is the position of the first query, used when the queries are the
    last tokens of a longer sequence (incremental decoding).
    """
    key_length = query_length if key_length is None else key_length
    rows = ops.expand_dims(ops.arange(query_length) + offset, axis=1)
    cols = ops.expand_dims(ops.arange(key_length), axis=0)
    return ops.greater_equal(rows, cols)


def decoder_self_attention_mask(target_ids, pad_id=PAD_ID):
    """(batch, length, length): causal AND target keys that are not padding."""
    length = ops.shape(target_ids)[1]
    causal = ops.expand_dims(causal_mask(length), axis=0)
    return ops.logical_and(causal, padding_mask(target_ids, pad_id))
