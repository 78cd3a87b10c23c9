"""One input contract for the searches, scoring and every export path.

- `truncate_source` owns the truncation rule: a source is its tokens then
  EOS, and one longer than `max_source_length` ids (EOS included) keeps its
  first `max_source_length - 1` tokens. `Translator`, the CLI (through
  `Translator`), the SavedModel's signatures and the CTranslate2 wrapper
  apply it; `source_length_limit` gives the limit, the same default
  (`DEFAULT_MAX_SOURCE_LENGTH`) on every path.
- `target_length_limit` is the longest target `score` takes, on every
  path; a longer one is refused (never cut: a cut target is another
  sentence).
- `check_inputs` checks concrete id arrays against the model once, before
  any backend op runs, so that every backend raises the same `ValueError`
  naming the limit: TensorFlow would raise deep inside a gather, JAX's
  `take` would fill out-of-range rows silently, PyTorch would raise an
  index error. Symbolic tensors (a graph or trace being built, as in a
  SavedModel export) cannot be read: there the exports make their inputs
  valid by construction (their own tokenizer, and the cut above).
"""

import numpy as np
from keras import ops

from keras_transformer.data.special_tokens import EOS_ID


# The default source limit of every path (`Translator`, `export_saved_model`,
# `export_ctranslate2`), in ids with EOS: the paper presets' data.max_length,
# the longest sentences their models train on. One default, so that a text
# gives the same output in process and served; a run's commands use its own
# data.max_length instead, on every path alike.
DEFAULT_MAX_SOURCE_LENGTH = 256


def source_length_limit(model, max_source_length=None):
    """The most source ids (EOS included) a path gives `model`:
    `max_source_length` (None: `DEFAULT_MAX_SOURCE_LENGTH`), capped at the
    learned position table's length for a model with learned positions."""
    limit = DEFAULT_MAX_SOURCE_LENGTH if max_source_length is None else max_source_length
    if getattr(model, "positional_encoding", None) == "learned":
        return min(limit, model.max_length)
    return limit


def source_tokens_kept(max_source_length):
    """The most tokens a source keeps before its EOS: `max_source_length`
    ids, EOS included (the training pipeline's convention). The SavedModel
    cuts its ragged tokens in its graph to this many."""
    return max_source_length - 1


def truncate_source(tokens, max_source_length, eos_id=EOS_ID):
    """(`tokens` + [EOS], cut) with the tokens cut so that the source holds
    at most `max_source_length` ids (EOS included); None: no cut."""
    tokens = list(tokens)
    cut = max_source_length is not None and len(tokens) > source_tokens_kept(max_source_length)
    if cut:
        tokens = tokens[: source_tokens_kept(max_source_length)]
    return tokens + [eos_id], cut


def target_length_limit(model, max_source_length=None, max_extra_length=None):
    """The most tokens (EOS not counted) a target to score may hold, None
    for no limit: the longest translation the same settings make
    (`max_source_length + max_extra_length`, where a source limit is set:
    the SavedModel's bound on a request's work), and for a model with
    learned positions one less than its table (BOS takes a position).
    `Translator.score` and the SavedModel's `score` signature refuse a
    longer target rather than score a cut one."""
    limits = []
    if max_source_length is not None and max_extra_length is not None:
        limits.append(max_source_length + max_extra_length)
    if getattr(model, "positional_encoding", None) == "learned":
        limits.append(model.max_length - 1)
    return min(limits) if limits else None


def describe_target_limit(model, max_source_length=None, max_extra_length=None):
    """Where `target_length_limit` comes from, for error messages."""
    limit = target_length_limit(model, max_source_length, max_extra_length)
    if getattr(model, "positional_encoding", None) == "learned" and limit == model.max_length - 1:
        return f"{limit} tokens (the model's learned position table of max_length={model.max_length}, less BOS)"
    return (f"{limit} tokens (the longest translation these settings make: max_source_length "
            f"{max_source_length} + max_extra_length {max_extra_length})")


def check_target_lengths(token_lists, model, max_source_length=None, max_extra_length=None, name="targets"):
    """Raises a ValueError naming the first of `token_lists` (targets
    without BOS/EOS) longer than `target_length_limit`, and the limit."""
    limit = target_length_limit(model, max_source_length, max_extra_length)
    if limit is None:
        return
    for index, tokens in enumerate(token_lists):
        if len(tokens) > limit:
            raise ValueError(
                f"score: {name}[{index}] has {len(tokens)} tokens, more than the limit of "
                f"{describe_target_limit(model, max_source_length, max_extra_length)}; a cut target "
                "would be a different sentence, so it is refused rather than scored."
            )


def _concrete(ids):
    """A numpy array of `ids`, or None for a symbolic tensor."""
    if isinstance(ids, np.ndarray):
        return ids
    try:
        return np.asarray(ops.convert_to_numpy(ids))
    except Exception:  # a symbolic tensor: nothing to read while tracing
        return None


def _check_range(name, values, vocabulary_size, what):
    bad = np.argwhere((values < 0) | (values >= vocabulary_size))
    if len(bad):
        row, column = (int(i) for i in bad[0])
        raise ValueError(
            f"`{name}` row {row} holds id {int(values[row, column])} at position {column}: the model's "
            f"{what} has {vocabulary_size} ids, so ids must lie in [0, {vocabulary_size})."
        )


def _lengths(values, pad_id):
    """Per row, the position after the last non-pad id."""
    content = values != pad_id
    return np.where(content.any(axis=1), values.shape[1] - np.argmax(content[:, ::-1], axis=1), 0)


def check_inputs(model, source_ids, target_ids=None, pad_id=None):
    """Checks concrete `source_ids` (and `target_ids`) against
    `model`; returns the arrays, with source and target columns beyond the
    learned position table dropped where they hold only padding.

    Raises a ValueError naming the limit for an id outside the source or
    target vocabulary, a source longer than the learned position table, and
    a target whose decoder input (BOS + target) is longer than it.
    """
    pad_id = getattr(model, "pad_id", 0) if pad_id is None else pad_id
    vocabulary_size = model.vocabulary_size
    source_vocabulary_size = getattr(model, "source_vocabulary_size", None) or vocabulary_size
    positions = model.max_length if getattr(model, "positional_encoding", None) == "learned" else None
    source = _concrete(source_ids)
    if source is not None:
        _check_range("source_ids", source, source_vocabulary_size, "source vocabulary")
        if positions is not None and source.shape[1] > positions:
            longest = int(_lengths(source, pad_id).max(initial=0))
            if longest > positions:
                raise ValueError(
                    f"`source_ids` holds a source of {longest} ids, longer than the model's learned position "
                    f"table of max_length={positions}: cut sources to {positions} ids, EOS included "
                    "(`keras_transformer.decoding.truncate_source`, or Translator's max_source_length)."
                )
            source_ids = source[:, :positions]
    if target_ids is not None:
        target = _concrete(target_ids)
        if target is not None:
            _check_range("target_ids", target, vocabulary_size, "target vocabulary")
            if positions is not None and target.shape[1] + 1 > positions:
                longest = int(_lengths(target, pad_id).max(initial=0))
                if longest + 1 > positions:
                    raise ValueError(
                        f"`target_ids` holds a target of {longest} tokens: with BOS the decoder reads "
                        f"{longest + 1} positions, more than the model's learned position table of "
                        f"max_length={positions}; targets may hold at most {positions - 1} tokens."
                    )
                target_ids = target[:, : positions - 1]
    return source_ids, target_ids


def check_prefix(prefix_ids, source_ids, bos_id, eos_id, pad_id, vocabulary_size):
    """() without a prefix, else (prefix_ids,) after checking what can be
    checked without running a graph: shape, batch, and (for concrete
    arrays) the ids themselves."""
    from keras_transformer.decoding.compiled import as_ids

    if prefix_ids is None:
        return ()
    prefix_ids = as_ids("prefix_ids", prefix_ids)
    source_ids = as_ids("source_ids", source_ids)
    rows, source_rows = prefix_ids.shape[0], source_ids.shape[0]
    if rows is not None and source_rows is not None and rows != source_rows:
        raise ValueError(f"`prefix_ids` has {rows} rows but `source_ids` has {source_rows}.")
    values = _concrete(prefix_ids)
    if values is None:
        return (prefix_ids,)
    for row, ids in enumerate(values.tolist()):
        content = ids[: len(ids) - next((i for i, t in enumerate(reversed(ids)) if t != pad_id), len(ids))]
        for token in content:
            if token in (pad_id, bos_id, eos_id) or not 0 <= token < vocabulary_size:
                raise ValueError(
                    f"`prefix_ids` row {row} holds id {token}: a prefix holds token ids in "
                    f"[0, {vocabulary_size}) other than pad {pad_id}, bos {bos_id} and eos {eos_id}, "
                    "padded at the end with pad."
                )
    return (prefix_ids,)
