"""Incremental decoding: the model's one step API.

A search (greedy, beam, or any other) drives the decoder one target position
at a time through three things, in the manner of flax's
`beam_search(tokens_to_logits)` and OpenNMT-tf's `dynamic_decode`:

- `initial_state`: a tuple of tensors of fixed shapes (a loop variable);
- `step(state, last_tokens, step) -> (logits, state)`: the float32 logits
  (rows, vocabulary) of position `step` for every row, given the token each
  row chose at the previous position (BOS at step 0);
- `reorder(state, rows)`: row i continues the hypothesis of row `rows[i]`;
- optionally `empty_state(capacity)` and `grow(state, capacity)`: a state
  with room for only `capacity` positions, and the same state with room for
  more. A step's cost grows with the room its state has (attention reads
  every cache entry, masked or not), so the searches decode in phases of
  growing capacity (see `keras_transformer.decoding.search`); a decoder
  without them runs in one phase from `initial_state`.

Rows are sentences times `beam_size`, sentence-major (row b * beam_size + k).
`Transformer.incremental_decoder` builds one. `IncrementalDecoder` caches
keys and values; `RecomputingDecoder` re-runs `model.decode` on the whole
prefix at every step (what tutorials do), the reference the cached one must
reproduce.

Everything is `keras.ops`, with shapes fixed within a phase: it runs under
TensorFlow (a plain graph or XLA), JAX and PyTorch.
"""

import copy

from keras import ops


def batch_size_of(x):
    """The leading dimension, static when known."""
    size = x.shape[0]
    return ops.shape(x)[0] if size is None else size


def write_column(buffer, column, values):
    """buffer[:, column] = values without slice_update (no XLA-only op on TF)."""
    width = ops.shape(buffer)[1]
    at_column = ops.equal(ops.arange(width, dtype="int32"), column)
    return ops.where(ops.expand_dims(at_column, 0), ops.expand_dims(values, 1), buffer)


class IncrementalDecoder:
    """One decoder position per step, with per-layer key/value caches.

    The model's own layers do the work (`DecoderLayer.residual_blocks` for
    the post-/pre-LN wiring, the projections, `ScaledDotProductAttention`,
    the feed-forward network, the tied output projection); only the cache
    layout is specific to decoding: one (batch, heads, capacity * beams,
    depth) tensor per layer for keys and one for values, where entry
    `position * beams + slot` holds what the row in `slot` wrote at
    `position` (with `jit_compile`, keys are stored (batch, heads, depth,
    capacity * beams): XLA's CPU dot reads them faster than operands it must
    transpose, about 5% of a base-size beam search in
    `benchmarks/HISTORY.md`, decode_variants.py). `capacity` is the number of positions the
    state has room for: `buffer_length` in `initial_state`, fewer in
    `empty_state(capacity)`; `grow(state, capacity)` appends room at the end
    of every cache (and of the slot history), so entries keep their places.
    Each step attends over all `capacity * beams` entries of its state
    (masked beyond the written ones), so a search that doubles the state's
    room as it goes (`keras_transformer.decoding.search`) reads at most about
    twice the entries written so far, instead of the whole buffer's.

    Keys and values never move (a grown state holds them at the same entries). A row that continues another (`reorder`)
    inherits its slot history ((rows, capacity) ints: which slot wrote
    each position of the hypothesis), and its self-attention mask admits
    exactly those entries. Attending over all beams' entries costs
    beam_size x the (small) attention FLOPs of one step, and saves copying
    every cache at every step. Cross-attention keys and values are projected
    once per sentence and shared by its beams.

    `jit_compile` (the searches' switch: the search is compiled with XLA):
    write the caches with `slice_update` (an in-place
    dynamic-update-slice under XLA and JAX; always so off TensorFlow). TensorFlow lowers it to
    `XlaDynamicUpdateSlice`, which needs XLA, so the plain graph (SavedModels
    for TF Serving) writes with a scatter instead.
    """

    def __init__(self, model, source_ids, beam_size, buffer_length, jit_compile=False):
        import keras

        self.model = model
        self.layers = list(model.decoder.stacked_layers)
        # slice_update writes (and transposed keys) wherever they compile in place.
        self.slice_update_writes = bool(jit_compile) or keras.backend.backend() != "tensorflow"
        self.keys_transposed = self.slice_update_writes
        self.buffer_length = buffer_length
        self.beams = beam_size
        self.batch = batch_size_of(source_ids)
        memory = model.encode(source_ids, training=False)
        source_length = ops.shape(source_ids)[1]
        self.source_mask = ops.reshape(
            ops.not_equal(source_ids, model.pad_id), (self.batch, 1, 1, source_length)
        )
        # Cross-attention runs per sentence: its beams are the query rows of
        # one (heads, beams, depth) block against the sentence's keys.
        self.cross = []
        for layer in self.layers:
            attention = layer.cross_attention
            keys = self._heads(attention, attention.key_projection(memory), attention.key_depth)
            values = self._heads(attention, attention.value_projection(memory), attention.depth)
            if self.keys_transposed:
                keys = ops.swapaxes(keys, -1, -2)
            self.cross.append((keys, values))
        # One matmul for the query, key and value projections of each step.
        self.fused_projections = [self._fuse(layer.self_attention) for layer in self.layers]
        self._index_batch()

    def _index_batch(self):
        """The per-batch index tensors of `self.batch` sentences."""
        first = self.layers[0].self_attention
        if self.beams > 1:
            self.own_slot = ops.tile(ops.arange(self.beams, dtype="int32"), (self.batch,))
            self.slots = ops.arange(self.beams, dtype="int32")
        if not self.slice_update_writes:
            # (sentence, head, slot) coordinates of every cache entry written per step.
            grid = ops.meshgrid(
                ops.arange(self.batch, dtype="int32"),
                ops.arange(first.num_heads, dtype="int32"),
                ops.arange(self.beams, dtype="int32"),
                indexing="ij",
            )
            self.write_indices = ops.reshape(ops.stack(grid, axis=-1), (-1, 3))

    def select(self, sentences):
        """This decoder restricted to the sentences `sentences` (int32
        indices into its batch): their cross-attention keys and values and
        source mask gathered (no re-encoding), the per-batch indices rebuilt.
        Its states are `select_state(state, sentences)`. The searches drop
        sentences that are done this way between phases."""
        selected = copy.copy(self)
        selected.batch = batch_size_of(sentences)
        selected.source_mask = ops.take(self.source_mask, sentences, axis=0)
        selected.cross = [(ops.take(keys, sentences, axis=0), ops.take(values, sentences, axis=0))
                          for keys, values in self.cross]
        selected._index_batch()
        return selected

    def select_state(self, state, sentences):
        """`state` restricted to the sentences `sentences`: every cache's
        batch entries and the slot history's rows (sentence-major beams)."""
        caches = tuple(ops.take(tensor, sentences, axis=0) for tensor in state[: 2 * len(self.layers)])
        if self.beams == 1:
            return caches
        return caches + (ops.take(state[-1], self._rows_of(sentences), axis=0),)

    def put_state(self, state, sentences, part):
        """`state` with the sentences `sentences` replaced by `part`, a
        `select_state(state, sentences)` decoded further (same capacity)."""
        layers = 2 * len(self.layers)
        at = ops.expand_dims(sentences, 1)
        caches = tuple(ops.scatter_update(whole, at, new) for whole, new in zip(state[:layers], part[:layers]))
        if self.beams == 1:
            return caches
        return caches + (ops.scatter_update(state[-1], ops.expand_dims(self._rows_of(sentences), 1), part[-1]),)

    def _rows_of(self, sentences):
        """The beam rows (sentence-major) of `sentences`."""
        return ops.reshape(ops.expand_dims(sentences * self.beams, 1) + self.slots, (-1,))

    @property
    def initial_state(self):
        """The state before step 0, with room for all `buffer_length` positions."""
        return self.empty_state(self.buffer_length)

    def empty_state(self, capacity):
        """The state before step 0, with room for `capacity` positions (an int,
        or a scalar tensor in a TensorFlow graph): steps 0 .. capacity - 1."""
        first = self.layers[0].self_attention
        entries = capacity * self.beams
        value_shape = (self.batch, first.num_heads, entries, first.depth)
        key_shape = (self.batch, first.num_heads, entries, first.key_depth)
        if self.keys_transposed:
            key_shape = (self.batch, first.num_heads, first.key_depth, entries)
        dtype = first.compute_dtype
        state = ()
        for _ in self.layers:
            state += (ops.zeros(key_shape, dtype=dtype), ops.zeros(value_shape, dtype=dtype))
        if self.beams > 1:
            state += (ops.zeros((self.batch * self.beams, capacity), dtype="int32"),)
        return state

    def grow(self, state, capacity):
        """`state` with room for `capacity` positions (at least its own): zeros
        appended after every cache's entries and the slot history's columns,
        so every written entry keeps its place."""
        room = self.empty_state(capacity - self.capacity_of(state))
        entry_axis = 3 if self.keys_transposed else 2
        grown = ()
        for index in range(len(self.layers)):
            keys, values = state[2 * index], state[2 * index + 1]
            grown += (
                ops.concatenate([keys, room[2 * index]], axis=entry_axis),
                ops.concatenate([values, room[2 * index + 1]], axis=2),
            )
        if self.beams > 1:
            grown += (ops.concatenate([state[-1], room[-1]], axis=1),)
        return grown

    def capacity_of(self, state):
        """The number of positions `state` has room for."""
        entries = state[1].shape[2]  # the first values cache: (batch, heads, entries, depth)
        if entries is None:
            entries = ops.shape(state[1])[2]
        return entries // self.beams

    @staticmethod
    def _fuse(attention):
        """(kernel, bias) of the concatenated query/key/value projections, or None."""
        denses = (attention.query_projection, attention.key_projection, attention.value_projection)
        for dense in denses:
            # Quantized or LoRA layers compute their kernels differently: call them.
            if getattr(dense, "quantization_mode", None) or getattr(dense, "lora_enabled", False):
                return None
        dtype = attention.compute_dtype
        kernel = ops.concatenate([ops.cast(d.kernel, dtype) for d in denses], axis=1)
        bias = None
        if attention.use_bias:
            bias = ops.concatenate([ops.cast(d.bias, dtype) for d in denses], axis=0)
        return kernel, bias

    def _project_query_key_value(self, index, attention, h):
        fused = self.fused_projections[index]
        if fused is None:
            return (attention.query_projection(h), attention.key_projection(h), attention.value_projection(h))
        kernel, bias = fused
        projected = ops.matmul(h, kernel)
        if bias is not None:
            projected = projected + bias
        width = attention.num_heads * attention.key_depth  # of the queries and of the keys
        return projected[..., :width], projected[..., width : 2 * width], projected[..., 2 * width :]

    @staticmethod
    def _heads(attention, x, depth):
        """(rows, length, heads * depth) -> (rows, heads, length, depth)."""
        return ops.transpose(attention.split_heads(x, depth), (0, 2, 1, 3))

    def _step_heads(self, attention, x, depth):
        """(rows, 1, heads * depth) -> (batch, heads, beams, depth): one step of every beam."""
        x = ops.reshape(x, (self.batch, self.beams, attention.num_heads, depth))
        return ops.transpose(x, (0, 2, 1, 3))

    def _merge_step_heads(self, attention, x):
        """(batch, heads, beams, depth) -> (rows, 1, d_model)."""
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (self.batch * self.beams, 1, attention.d_model))

    def _write(self, cache, new, step, transposed=False):
        """cache[:, :, step * beams + slot] = new[:, :, slot] for every slot (into a
        `transposed` (batch, heads, depth, entries) cache: along the last axis)."""
        if transposed:
            return ops.slice_update(cache, [0, 0, 0, step * self.beams], ops.swapaxes(new, -1, -2))
        if self.slice_update_writes:
            return ops.slice_update(cache, [0, 0, step * self.beams, 0], new)
        count = ops.shape(self.write_indices)[0]
        position = self.write_indices[:, 2:] + step * self.beams
        indices = ops.concatenate([self.write_indices[:, :2], position], axis=1)
        return ops.scatter_update(cache, indices, ops.reshape(new, (count, ops.shape(new)[-1])))

    def _keys_for_attention(self, keys):
        """Keys as attention takes them, (..., length, depth)."""
        return ops.swapaxes(keys, -1, -2) if self.keys_transposed else keys

    def _self_attention_mask(self, step, state):
        """Which cache entries each row sees, (batch, 1, beams, capacity * beams),
        and the updated slot history."""
        positions = ops.arange(self.capacity_of(state), dtype="int32")
        written = ops.less_equal(positions, step)
        if self.beams == 1:
            return ops.reshape(written, (1, 1, 1, -1)), ()
        history = write_column(state[-1], step, self.own_slot)  # (rows, capacity)
        own = ops.equal(ops.expand_dims(history, -1), self.slots)  # (rows, capacity, beams)
        visible = ops.logical_and(own, ops.reshape(written, (1, -1, 1)))
        return ops.reshape(visible, (self.batch, 1, self.beams, -1)), (history,)

    def step(self, state, last_tokens, step):
        hidden, state = self.hidden_step(state, last_tokens, step)
        logits = self.model.target_embedding.logits(hidden)
        return ops.cast(logits, "float32"), state

    def hidden_step(self, state, last_tokens, step):
        """`step` before the output projection: the decoder's (rows,
        d_model) outputs and the new state (a vocabulary shortlist projects
        them onto its own rows)."""
        model = self.model
        x = model.target_embedding(ops.expand_dims(last_tokens, 1))
        x = x + model.position_encoding(x, start_index=step)
        self_mask, history = self._self_attention_mask(step, state)
        new_state = ()
        for index, layer in enumerate(self.layers):
            keys, values = state[2 * index], state[2 * index + 1]
            cross_keys, cross_values = self.cross[index]

            def self_attend(h, index=index, layer=layer, keys=keys, values=values):
                attention = layer.self_attention
                query, key, value = self._project_query_key_value(index, attention, h)
                query = self._step_heads(attention, query, attention.key_depth)
                keys = self._write(keys, self._step_heads(attention, key, attention.key_depth), step,
                                   self.keys_transposed)
                values = self._write(values, self._step_heads(attention, value, attention.depth), step)
                # Each row attends over every slot's entries; the mask keeps
                # those of its own hypothesis.
                attended = attention.attention(
                    query, self._keys_for_attention(keys), values, attention_mask=self_mask
                )
                return attention.output_projection(self._merge_step_heads(attention, attended)), (keys, values)

            def cross_attend(h, layer=layer, keys=cross_keys, values=cross_values):
                attention = layer.cross_attention
                query = self._step_heads(attention, attention.query_projection(h), attention.key_depth)
                attended = attention.attention(
                    query, self._keys_for_attention(keys), values, attention_mask=self.source_mask
                )
                return attention.output_projection(self._merge_step_heads(attention, attended)), None

            x, written, _ = layer.residual_blocks(x, self_attend, cross_attend, training=False)
            new_state += written
        if model.decoder.final_norm is not None:
            x = model.decoder.final_norm(x)
        return x[:, 0], new_state + history

    def reorder(self, state, rows):
        """Row i takes over the slot history of row `rows[i]`; keys and values
        stay where they were written (a gather of every cache per step was a
        quarter of beam search)."""
        if self.beams == 1:
            return tuple(ops.take(tensor, rows, axis=0) for tensor in state)
        return state[:-1] + (ops.take(state[-1], rows, axis=0),)


class RecomputingDecoder:
    """Re-runs `model.decode` on BOS + every token so far at each step.

    No cache: the state is the decoder's input so far, (rows, buffer_length).
    The reference `IncrementalDecoder` must reproduce, and a benchmark
    baseline.
    """

    def __init__(self, model, source_ids, beam_size, buffer_length):
        self.model = model
        memory = model.encode(source_ids, training=False)
        self.memory = ops.repeat(memory, beam_size, axis=0) if beam_size > 1 else memory
        self.source_ids = ops.repeat(source_ids, beam_size, axis=0) if beam_size > 1 else source_ids
        rows = batch_size_of(source_ids) * beam_size
        self.initial_state = (ops.full((rows, buffer_length), model.pad_id, dtype="int32"),)

    def step(self, state, last_tokens, step):
        (inputs,) = state
        inputs = write_column(inputs, step, ops.cast(last_tokens, "int32"))
        logits = self.model.decode(inputs, self.memory, self.source_ids, training=False)
        return ops.cast(ops.take(logits, step, axis=1), "float32"), (inputs,)

    def reorder(self, state, rows):
        return tuple(ops.take(tensor, rows, axis=0) for tensor in state)
