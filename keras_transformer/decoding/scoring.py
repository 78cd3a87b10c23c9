"""Scoring given translations (forced decoding).

One full forward pass of the decoder over BOS + each target: the
log-probability the model gives every target token and the EOS after it,
their sum, the token count (EOS included) and the length-normalised
score (GNMT's penalty or the "length" rule, `penalty.py`), on the same
scale as `beam_search`'s "log_probs" and "scores" (a beam output scored
here gets back its beam score). `keras.ops` only.
"""

from keras import ops

from keras_transformer.decoding import compiled
from keras_transformer.decoding.inputs import check_inputs
from keras_transformer.decoding import penalty
from keras_transformer.decoding.options import check_alpha, check_length_penalty
from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID


def _score(model, source_ids, target_ids, alpha, bos_id, eos_id, pad_id, append_eos, length_penalty="gnmt"):
    source_ids = ops.cast(source_ids, "int32")
    target_ids = ops.cast(target_ids, "int32")
    rows = ops.shape(target_ids)[0]
    lengths = ops.sum(ops.cast(ops.not_equal(target_ids, pad_id), "int32"), axis=1)
    # Decoder input BOS + target; labels target + EOS (one more column for it).
    inputs = ops.concatenate([ops.full((rows, 1), bos_id, dtype="int32"), target_ids], axis=1)
    labels = ops.pad(target_ids, [[0, 0], [0, 1]], constant_values=pad_id)
    if append_eos:
        columns = ops.arange(ops.shape(labels)[1], dtype="int32")
        at_end = ops.equal(ops.expand_dims(columns, 0), ops.expand_dims(lengths, 1))
        labels = ops.where(at_end, eos_id, labels)
        lengths = lengths + 1
    memory = model.encode(source_ids, training=False)
    logits = model.decode(inputs, memory, source_ids, training=False)
    log_probs = logits - ops.logsumexp(logits, axis=-1, keepdims=True)
    token_log_probs = ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), axis=-1)[..., 0]
    token_log_probs = ops.where(ops.not_equal(labels, pad_id), token_log_probs, 0.0)
    total = ops.sum(token_log_probs, axis=1)
    return {
        "token_log_probs": token_log_probs,
        "log_probs": total,
        "lengths": lengths,
        "scores": total / penalty.length_penalty(lengths, alpha, length_penalty),
    }


def score_translations(
    model,
    source_ids,
    target_ids,
    *,
    alpha=0.6,
    append_eos=True,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    compile=True,
    length_penalty="gnmt",
):
    """Log-probabilities of given translations.

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: (batch, source_length) ids padded with `pad_id`, EOS
            included (the search's input format).
        target_ids: (batch, target_length) ids of the translations, without
            BOS or EOS, padded with `pad_id`.
        alpha: length penalty exponent of "scores".
        length_penalty: the rule of "scores", "gnmt" (default) or "length"
            (`keras_transformer.decoding.penalty.LENGTH_PENALTIES`).
        append_eos: score the EOS after each target too (as a finished
            hypothesis); False scores a prefix or a hypothesis cut at its
            length limit.

    Returns:
        A dict of tensors: "token_log_probs" (batch, target_length + 1),
        log P of each target token (then EOS) and 0 at padding;
        "log_probs" (batch,) their sum; "lengths" (batch,) the tokens
        scored; "scores" log_probs / ((5 + length) / 6) ** alpha (GNMT),
        or log_probs / length ** alpha ("length").
    """
    alpha = check_alpha(alpha)
    check_length_penalty(length_penalty)
    target_ids = compiled.as_ids("target_ids", target_ids)
    source = compiled.as_ids("source_ids", source_ids)
    # Out-of-range ids, and sources or targets longer than learned positions, refused alike on every backend.
    source_ids, target_ids = check_inputs(model, source, target_ids, pad_id=pad_id)
    source = compiled.as_ids("source_ids", source_ids)
    if source.shape[0] is not None and target_ids.shape[0] is not None and source.shape[0] != target_ids.shape[0]:
        raise ValueError(
            f"`source_ids` has {source.shape[0]} rows but `target_ids` has {target_ids.shape[0]}."
        )

    def search(model, source_ids, target_ids):
        return _score(model, source_ids, target_ids, float(alpha), bos_id, eos_id, pad_id, append_eos,
                      length_penalty)

    key = ("score", float(alpha), append_eos, bos_id, eos_id, pad_id, length_penalty)
    return compiled.run(model, source_ids, key, search, compile, False, (target_ids,))
