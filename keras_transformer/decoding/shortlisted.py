"""Decoding with a vocabulary shortlist (`keras_transformer.decoding.shortlist`).

Each decoding step projects the decoder's outputs onto the batch's
candidate rows of the tied embedding only: logits = hidden @
embedding[candidates]^T, (rows, K) instead of (rows, V). The searches
themselves are unchanged; they run on `ShortlistedModel`, a stand-in for
the model whose decoder does that, in one of two spaces:

- "shortlist": the search sees a vocabulary of K ids, position i standing
  for target id candidates[i]; the decoder maps the tokens it is fed back
  to target ids for the embedding lookup, and the output ids are mapped
  back after the search (`search`). Its top-k and softmax read K entries.
- "full": the K logits are placed into a (rows, V) row of -inf (a gather
  through each target id's position in the list), and the search runs in
  target ids as without a shortlist.

Both give the same results: in either, a piece outside the list has
probability 0 and the softmax normalises over the list, as a full search
on logits where unlisted pieces are -inf would. Candidates are sorted
ascending and always hold the special ids 0..3, so pad, BOS and EOS sit at
their own ids in shortlist space, and ties between pieces break in the same
order as in the full vocabulary. The list is padded to a multiple of 128
entries (8 for vocabularies under 2,048: fewer shapes to compile); padding
entries score -inf.

The candidates live in non-trainable Keras variables of the stand-in, one
stand-in per (model, K, space), so a compiled search (XLA, `jax.jit`)
reads each batch's list without recompiling. Everything here is
`keras.ops`: TensorFlow, JAX and PyTorch.
"""

import weakref

import numpy as np
from keras import ops

from keras_transformer.decoding.shortlist import SPECIAL_IDS

SPACES = ("shortlist", "full")

# model -> {(size, space): ShortlistedModel}
_STAND_INS = weakref.WeakKeyDictionary()


class _ShortlistedDecoder:
    """The model's incremental decoder, projecting onto the candidates only."""

    def __init__(self, inner, stand_in):
        self.inner = inner
        self.stand_in = stand_in

    def __getattr__(self, name):  # initial_state, empty_state, grow, reorder, ...
        return getattr(self.inner, name)

    def select(self, sentences):
        """The inner decoder's `select`, still projecting onto the candidates
        (one list for the whole batch)."""
        return _ShortlistedDecoder(self.inner.select(sentences), self.stand_in)

    def step(self, state, last_tokens, step):
        stand_in = self.stand_in
        ids = ops.convert_to_tensor(stand_in.candidate_ids)
        if stand_in.space == "shortlist":
            last_tokens = ops.take(ids, ops.cast(last_tokens, "int32"), axis=0)
        if hasattr(self.inner, "hidden_step"):
            hidden, state = self.inner.hidden_step(state, last_tokens, step)
            logits = stand_in.model.target_embedding.logits(hidden, ids)
        else:  # a decoder without the split (RecomputingDecoder, StepFunction): all rows, then the listed ones
            full, state = self.inner.step(state, last_tokens, step)
            logits = ops.take(full, ids, axis=1)
        logits = ops.cast(logits, "float32") + ops.expand_dims(ops.convert_to_tensor(stand_in.candidate_bias), 0)
        if stand_in.space == "full":
            # Position K is a column of -inf for every unlisted id.
            padded = ops.pad(logits, [[0, 0], [0, 1]], constant_values=float("-inf"))
            logits = ops.take(padded, ops.convert_to_tensor(stand_in.positions), axis=1)
        return logits, state


class ShortlistedModel:
    """`model` for the searches, with logits for `size` candidate ids only
    (set per batch with `assign`); see the module docstring for `space`."""

    def __init__(self, model, size, space="shortlist"):
        import keras

        if space not in SPACES:
            raise ValueError(f"`space` must be one of {SPACES}, got {space!r}.")
        self.model = model
        self.size = int(size)
        self.space = space
        self.vocabulary_size = self.size if space == "shortlist" else model.vocabulary_size
        self.source_vocabulary_size = getattr(model, "source_vocabulary_size", None) or model.vocabulary_size
        self.candidate_ids = keras.Variable(np.zeros(self.size, np.int32), dtype="int32", trainable=False,
                                            name="shortlist_ids")
        self.candidate_bias = keras.Variable(np.zeros(self.size, np.float32), dtype="float32", trainable=False,
                                             name="shortlist_bias")
        self._own = [self.candidate_ids, self.candidate_bias]
        if space == "full":
            self.positions = keras.Variable(np.zeros(model.vocabulary_size, np.int32), dtype="int32",
                                            trainable=False, name="shortlist_positions")
            self._own.append(self.positions)

    @classmethod
    def of_tensors(cls, model, ids, positions=None, bias=None, size=None):
        """A stand-in over given tensors (a graph's candidates): `ids` (K,)
        the listed target ids. In full space (`graph_stand_in`),
        `positions` (vocabulary,) each id's index in `ids`, or K when
        unlisted; in shortlist space (`static_graph_stand_in`), `size` the
        static K and `bias` (K,) 0 for real entries, -inf for padding."""
        self = cls.__new__(cls)
        self.model, self.size = model, size
        self.space = "full" if size is None else "shortlist"
        self.vocabulary_size = model.vocabulary_size if size is None else size
        self.source_vocabulary_size = getattr(model, "source_vocabulary_size", None) or model.vocabulary_size
        self.candidate_ids, self.positions = ids, positions
        self.candidate_bias = ops.zeros(ops.shape(ids), dtype="float32") if bias is None else bias
        self._own = []
        return self

    def __getattr__(self, name):  # pad_id, max_length, positional_encoding, built, build, ...
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    @property
    def trainable_variables(self):
        return self.model.trainable_variables

    @property
    def non_trainable_variables(self):
        return list(self.model.non_trainable_variables) + self._own

    def assign(self, ids, count):
        """This batch's candidates: `ids` (size,) sorted, the first `count` real."""
        ids = np.asarray(ids, np.int32)
        if ids.shape != (self.size,):
            raise ValueError(f"expected {self.size} candidate ids, got shape {ids.shape}.")
        if tuple(ids[: len(SPECIAL_IDS)]) != SPECIAL_IDS:
            raise ValueError(f"candidates must start with the special ids {SPECIAL_IDS}, got {ids[:4].tolist()}.")
        bias = np.where(np.arange(self.size) < count, 0.0, -np.inf).astype(np.float32)
        self.candidate_ids.assign(ids)
        self.candidate_bias.assign(bias)
        if self.space == "full":
            positions = np.full(self.model.vocabulary_size, self.size, np.int32)
            positions[ids[:count]] = np.arange(count, dtype=np.int32)
            self.positions.assign(positions)

    def incremental_decoder(self, source_ids, beam_size=1, buffer_length=None, jit_compile=False, use_cache=True):
        inner = self.model.incremental_decoder(source_ids, beam_size=beam_size, buffer_length=buffer_length,
                                               jit_compile=jit_compile, use_cache=use_cache)
        return _ShortlistedDecoder(inner, self)


def stand_in(model, size, space="shortlist"):
    """The `ShortlistedModel` of `model` for lists of `size` ids (one per
    model, size and space, so that compiled searches are reused)."""
    per_model = _STAND_INS.setdefault(model, {})
    key = (int(size), space)
    if key not in per_model:
        per_model[key] = ShortlistedModel(model, size, space)
    return per_model[key]


def graph_stand_in(model, shortlist, source_ids):
    """A full-space stand-in whose candidates are computed from
    `shortlist`'s table (constants of the graph being built) for
    `source_ids`: what a SavedModel bakes in. The number of candidates is
    known only when the graph runs, so the plain graph can run it, not XLA."""
    vocabulary_size = model.vocabulary_size
    rows = ops.take(ops.convert_to_tensor(shortlist.table), ops.reshape(ops.cast(source_ids, "int32"), (-1,)),
                    axis=0)
    listed = ops.concatenate([ops.reshape(rows, (-1,)), ops.convert_to_tensor(shortlist.always)], axis=0)
    listed = ops.maximum(listed, 0)  # -1 (no piece) becomes pad, which is listed anyway
    marks = ops.greater(ops.bincount(listed, minlength=vocabulary_size), 0)
    ids = ops.cast(ops.reshape(ops.nonzero(marks)[0], (-1,)), "int32")  # ascending
    count = ops.shape(ids)[0]
    positions = ops.scatter_update(ops.full((vocabulary_size,), count, dtype="int32"), ops.expand_dims(ids, 1),
                                   ops.arange(count, dtype="int32"))
    return ShortlistedModel.of_tensors(model, ids, positions)


def static_graph_stand_in(model, shortlist, source_ids, size):
    """(stand-in, count): a shortlist-space stand-in over exactly `size`
    candidates computed from `shortlist`'s table (constants of the graph
    being built) for `source_ids`, with static shapes only, so XLA compiles
    it: the batch's sorted union (special ids at 0..3), then pad entries
    scoring -inf. `count` (a scalar tensor) is the union's true size; where
    it exceeds `size` the list is cut, and the caller must run the full
    search instead (what the XLA SavedModel variant does)."""
    vocabulary_size = model.vocabulary_size
    rows = ops.take(ops.convert_to_tensor(shortlist.table), ops.reshape(ops.cast(source_ids, "int32"), (-1,)),
                    axis=0)
    listed = ops.concatenate([ops.reshape(rows, (-1,)), ops.convert_to_tensor(shortlist.always)], axis=0)
    listed = ops.maximum(listed, 0)  # -1 (no piece) becomes pad, which is listed anyway
    hits = ops.scatter(ops.expand_dims(listed, 1), ops.ones_like(listed), (vocabulary_size,))
    marks = ops.cast(ops.greater(hits, 0), "int32")
    count = ops.sum(marks)
    position = ops.cumsum(marks) - 1  # each listed id's index in the ascending list
    kept = ops.logical_and(ops.greater(marks, 0), ops.less(position, size))
    # Kept ids land at their index; the rest in one spare slot, dropped.
    slots = ops.where(kept, position, size)
    values = ops.where(kept, ops.arange(vocabulary_size, dtype="int32"), 0)
    ids = ops.scatter(ops.expand_dims(slots, 1), values, (size + 1,))[:size]
    bias = ops.where(ops.less(ops.arange(size, dtype="int32"), count), 0.0, float("-inf"))
    return ShortlistedModel.of_tensors(model, ids, bias=ops.cast(bias, "float32"), size=size), count


def check_fits(shortlist, model):
    """A ValueError unless `shortlist` was built for `model`'s vocabularies."""
    source_size = getattr(model, "source_vocabulary_size", None) or model.vocabulary_size
    if shortlist.target_vocabulary_size != model.vocabulary_size:
        raise ValueError(f"the shortlist is for a target vocabulary of {shortlist.target_vocabulary_size} ids, "
                         f"the model has {model.vocabulary_size}.")
    if shortlist.source_vocabulary_size != source_size:
        raise ValueError(f"the shortlist is for a source vocabulary of {shortlist.source_vocabulary_size} ids, "
                         f"the model has {source_size}.")


def search(search_function, model, shortlist, source_ids, prefix_ids=None, space="shortlist", multiple=None,
           **options):
    """`search_function(model, source_ids, prefix_ids=..., **options)` (a
    `beam_search`, `greedy_search` or `sampling_search`) restricted to the
    batch's candidates of `shortlist` (plus the prefix ids), with its "ids"
    in target ids. A list as large as the vocabulary runs the plain search."""
    if space not in SPACES:
        raise ValueError(f"`space` must be one of {SPACES}, got {space!r}.")
    for name in ("bos_id", "eos_id", "pad_id"):
        if name in options and options[name] not in SPECIAL_IDS:
            raise ValueError(f"a shortlist keeps the special ids {SPECIAL_IDS}; `{name}`={options[name]} is not one.")
    if shortlist.target_vocabulary_size != model.vocabulary_size:
        raise ValueError(f"the shortlist is for a target vocabulary of {shortlist.target_vocabulary_size} ids, "
                         f"the model has {model.vocabulary_size}.")
    source = ops.convert_to_numpy(source_ids)
    prefix = None if prefix_ids is None else np.asarray(ops.convert_to_numpy(prefix_ids), np.int64)
    ids, count = shortlist.candidates(source, prefix, multiple=multiple)
    if len(ids) >= model.vocabulary_size:
        return search_function(model, source_ids, prefix_ids=prefix_ids, **options)
    return search_candidates(search_function, model, ids, count, source_ids, prefix, space, **options)


def search_candidates(search_function, model, ids, count, source_ids, prefix=None, space="shortlist", **options):
    """`search`'s restricted search on given candidates: `ids` (size,) target
    ids sorted, the first `count` real (`Shortlist.candidates`), whatever
    their number (`search` runs the plain search instead when they cover
    the vocabulary); `prefix` numpy target ids or None."""
    shortlisted = stand_in(model, len(ids), space)
    shortlisted.assign(ids, count)
    if space == "full":
        full_prefix = None if prefix is None else np.asarray(prefix).astype(np.int32)
        return search_function(shortlisted, source_ids, prefix_ids=full_prefix, **options)
    if prefix is not None:
        positions = np.zeros(model.vocabulary_size, np.int64)
        positions[ids[:count]] = np.arange(count)
        prefix = positions[prefix].astype(np.int32)  # pad (0) stays 0
    result = dict(search_function(shortlisted, source_ids, prefix_ids=prefix, **options))
    result["ids"] = ops.take(ops.convert_to_tensor(ids), ops.cast(result["ids"], "int32"), axis=0)
    return result
