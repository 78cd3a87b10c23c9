"""KerasHub layers as a benchmark contender (TensorFlow backend): the like-for-like "tied" architecture and
the keras-io example's, and a BeamSampler search made to decode as ours does. What each is, and how the search
is made to match ours: docs/benchmarks.md, "The shared harness"."""

import math
import warnings

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from keras import ops

from benchmarks._workloads import SEARCH, Contender, compile_ours, set_policy
from keras_transformer.data import BOS_ID, EOS_ID, PAD_ID

ARCHITECTURES = ("tied", "keras-io")
MAX_POSITIONS = 512  # the keras-io architecture's learned position table


class KerasHubTranslator(keras.Model):
    def __init__(self, vocabulary_size, d_model, num_heads, d_ff, num_layers, dropout, architecture="tied",
                 norm_first=False, **kwargs):
        super().__init__(**kwargs)
        if architecture not in ARCHITECTURES:
            raise ValueError(f"architecture {architecture!r}: expected one of {ARCHITECTURES}")
        self.architecture, self.d_model, self.num_heads = architecture, d_model, num_heads
        tied = architecture == "tied"
        if tied:
            self.embedding = keras_hub.layers.ReversibleEmbedding(vocabulary_size, d_model, tie_weights=True,
                                                                  name="shared_embedding")
            self.positions = keras_hub.layers.SinePositionEncoding(name="positions")
            self.embedding_dropout = keras.layers.Dropout(dropout)
        else:
            self.source_embedding = keras_hub.layers.TokenAndPositionEmbedding(vocabulary_size, MAX_POSITIONS,
                                                                               d_model)
            self.target_embedding = keras_hub.layers.TokenAndPositionEmbedding(vocabulary_size, MAX_POSITIONS,
                                                                               d_model)
            self.projection = keras.layers.Dense(vocabulary_size)
        epsilon = {"layer_norm_epsilon": 1e-6} if tied else {}
        self.encoders = [keras_hub.layers.TransformerEncoder(d_ff, num_heads, dropout=dropout,
                                                            normalize_first=norm_first, **epsilon)
                         for _ in range(num_layers)]
        self.decoders = [keras_hub.layers.TransformerDecoder(d_ff, num_heads, dropout=dropout,
                                                            normalize_first=norm_first, **epsilon)
                         for _ in range(num_layers)]
        # Pre-LN stacks end in a layer norm (KerasHub's layers leave it to the model).
        final_epsilon = 1e-6 if tied else 1e-5
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=final_epsilon) if norm_first else None
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=final_epsilon) if norm_first else None
        self.logits_float32 = keras.layers.Activation("linear", dtype="float32")

    def materialize(self):
        """Builds every layer with one call; the tied architecture's attention layers then drop no
        weights (ours drops none; KerasHub's layers create them, with their one rate, when built)."""
        source = np.full((1, 2), 4, "int32")
        self({"source": source, "target": source})
        if self.architecture == "tied":
            for layer in self.encoders + self.decoders:
                for attention in attention_layers(layer):  # as if built with dropout=0
                    attention._dropout, attention._dropout_layer.rate = 0.0, 0.0
        return self

    def embed(self, ids, side, start_index=0, training=None):
        if self.architecture == "tied":
            x = self.embedding(ids) * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
            return self.embedding_dropout(x + self.positions(x, start_index=start_index), training=training)
        layer = self.source_embedding if side == "source" else self.target_embedding
        return layer(ids, start_index=start_index)

    def output_logits(self, y):
        y = y if self.decoder_norm is None else self.decoder_norm(y)
        logits = self.embedding(y, reverse=True) if self.architecture == "tied" else self.projection(y)
        return self.logits_float32(logits)

    def encode(self, source, training=None):
        padding = ops.not_equal(source, PAD_ID)
        x = self.embed(source, "source", training=training)
        for layer in self.encoders:
            x = layer(x, padding_mask=padding, training=training)
        return (x if self.encoder_norm is None else self.encoder_norm(x)), padding

    def call(self, inputs, training=None):
        memory, source_padding = self.encode(inputs["source"], training)
        target = inputs["target"]
        y = self.embed(target, "target", training=training)
        for layer in self.decoders:
            y = layer(y, memory, decoder_padding_mask=ops.not_equal(target, PAD_ID),
                      encoder_padding_mask=source_padding, training=training)
        return self.output_logits(y)


def attention_layers(layer):
    """The attention layers of a KerasHub TransformerEncoder or TransformerDecoder."""
    return [getattr(layer, name) for name in ("_self_attention_layer", "_cross_attention_layer")
            if getattr(layer, name, None) is not None]


def next_token_rule(logits, last_tokens, generated, limits):
    """The logits BeamSampler sees for the next token, so that it searches as ours does.

    `last_tokens` (rows,) the beams' last tokens; `generated` the tokens each
    already has (BOS not counted); `limits` (rows,) the output cap per beam.
    Finished beams (last token EOS or pad) may only add pad, with probability
    1; live ones may not produce pad or BOS, and only EOS at their cap.
    """
    vocabulary = ops.shape(logits)[-1]
    ids = ops.arange(vocabulary)[None, :]
    finished = ops.logical_or(ops.equal(last_tokens, EOS_ID), ops.equal(last_tokens, PAD_ID))[:, None]
    at_cap = ops.greater_equal(generated + 1, limits)[:, None]
    blocked = ops.cast(-1e9, logits.dtype)
    live = ops.where(ops.logical_or(ops.equal(ids, PAD_ID), ops.equal(ids, BOS_ID)), blocked, logits)
    live = ops.where(ops.logical_and(at_cap, ops.not_equal(ids, EOS_ID)), blocked, live)
    only_pad = ops.where(ops.equal(ids, PAD_ID), ops.cast(0.0, logits.dtype), blocked)
    return ops.where(finished, only_pad, live)


def best_by_length_penalty(beams, log_probs, alpha):
    """(rows, length) ids of the beam with the best log P / ((5 + |Y|) / 6) ** alpha, |Y| counting EOS.

    `beams` (rows, beams, length) with BOS first and pad after EOS; `log_probs` (rows, beams)."""
    lengths = ops.sum(ops.cast(ops.not_equal(beams[:, :, 1:], PAD_ID), "float32"), axis=-1)
    scores = log_probs / ops.power((5.0 + lengths) / 6.0, alpha)
    best = ops.argmax(scores, axis=-1)
    return ops.take_along_axis(beams, best[:, None, None], axis=1)[:, 0]


def all_beams_and_log_probs(model, sampler, source_ids, output_length, extra):
    """`sampler` (a BeamSampler with return_all_beams=True) over the decoder layers' caches:
    (rows, beams, output_length + 1) ids, BOS first and pad after EOS, and (rows, beams) log P."""
    beams = sampler.num_beams
    heads, depth = model.num_heads, model.d_model // model.num_heads
    memory, padding = model.encode(source_ids, training=False)
    limits = ops.repeat(ops.sum(ops.cast(padding, "int32"), axis=1) + extra, beams, axis=0)
    memory = ops.repeat(memory, beams, axis=0)
    padding = ops.repeat(padding, beams, axis=0)
    rows = ops.shape(memory)[0]
    dtype = memory.dtype  # bfloat16 under a mixed policy: the loop's cache must keep one dtype
    first = ops.zeros((rows, 1, model.d_model), dtype)
    cross = []
    for layer in model.decoders:
        _, _, cache = layer(
            first, memory, encoder_padding_mask=padding,
            self_attention_cache=ops.zeros((rows, 2, 1, heads, depth), dtype), self_attention_cache_update_index=0,
            cross_attention_cache=ops.zeros((rows, 2, ops.shape(memory)[1], heads, depth), dtype),
            cross_attention_cache_update_index=0, training=False,
        )
        cross.append(cache)

    def next_token_logits(prompt, cache, index):
        last = ops.take(prompt, index - 1, axis=1)
        h = model.embed(ops.expand_dims(last, 1), "target", start_index=index - 1, training=False)
        updated = []
        for i, layer in enumerate(model.decoders):
            h, layer_cache, _ = layer(
                h, memory, encoder_padding_mask=padding,
                self_attention_cache=cache[:, i], self_attention_cache_update_index=index - 1,
                cross_attention_cache=cross[i], cross_attention_cache_update_index=None, training=False,
            )
            updated.append(layer_cache)
        logits = ops.cast(model.output_logits(h)[:, 0], "float32")
        return next_token_rule(logits, last, index - 1, limits), None, ops.stack(updated, axis=1)

    batch = ops.shape(source_ids)[0]
    prompt = tf.concat([tf.fill([batch, 1], BOS_ID), tf.zeros([batch, output_length], tf.int32)], axis=1)
    cache = ops.zeros((batch, len(model.decoders), 2, output_length, heads, depth), dtype)
    return sampler(next_token_logits, prompt, cache=cache, index=1, stop_token_ids=[EOS_ID])


class KerasHub(Contender):
    backend = "tensorflow"

    def __init__(self, name="keras-hub-tied", label="", architecture="tied", policy=None):
        self.name, self.label, self.architecture, self.policy = name, label, architecture, policy

    def build(self, size, policy=None, optimizer=None, norm_first=False):
        """The model compiled with our loss and `optimizer` (default `paper_optimizer`); the keras-io
        architecture without an `optimizer` trains as the example does (stock Adam 1e-4, plain
        cross-entropy ignoring pad): the throughput script's labelled row."""
        set_policy(policy or self.policy)
        model = KerasHubTranslator(size["vocab"], size["d_model"], size["heads"], size["d_ff"], size["layers"],
                                   size["dropout"], architecture=self.architecture, norm_first=norm_first)
        model.materialize()
        if self.architecture == "keras-io" and optimizer is None:
            model.compile(optimizer=keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID))
            return model
        return compile_ours(model, size["d_model"], optimizer=optimizer)

    def decode(self, model, tokenizer, sources, search=SEARCH):
        """Sorted-by-length batches, widths padded to a multiple of 8 (one compiled program per shape)."""
        # Priming the cross-attention caches runs a 1-slot self-attention: Keras
        # warns about a softmax over one key, which is what that call means.
        warnings.filterwarnings("ignore", message="You are using a softmax over axis")
        sampler = keras_hub.samplers.BeamSampler(num_beams=search["beam_size"], return_all_beams=True)
        extra, alpha = search["max_extra_length"], search["alpha"]

        def generate(ids, length):  # the best hypothesis per source row: (rows, length + 1) ids, BOS first
            beams, log_probs = all_beams_and_log_probs(model, sampler, ids, length, extra)
            return best_by_length_penalty(beams, log_probs, alpha)

        generate = tf.function(generate, jit_compile=True, autograph=False, reduce_retracing=False)
        cut = search["max_source_length"] - 1
        ids = [row[:cut] + [EOS_ID] for row in tokenizer.tokenize(sources).to_list()]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        outputs = [None] * len(ids)
        batch_size = search["batch_size"]
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            width = -(-max(len(ids[i]) for i in rows) // 8) * 8
            batch = np.full((len(rows), width), PAD_ID, "int32")
            for position, index in enumerate(rows):
                batch[position, :len(ids[index])] = ids[index]
            # `width + extra` is a Python int: one compiled program per (rows, width).
            result = generate(tf.constant(batch), width + extra).numpy()[:, 1:]
            for position, index in enumerate(rows):
                outputs[index] = result[position]
            print(f"decoded {min(start + batch_size, len(order))}/{len(order)}", flush=True)
        longest = max(len(o) for o in outputs)
        texts = tokenizer.detokenize(np.stack([np.pad(o, (0, longest - len(o))) for o in outputs]))
        return [t.decode("utf-8") for t in texts.numpy()]

    @staticmethod
    def search_description(search=SEARCH):
        return (f"KerasHub BeamSampler({search['beam_size']}), cached, XLA; finished beams frozen, cap source + "
                f"{search['max_extra_length']}, final beams rescored with length penalty {search['alpha']}")


TIED_LABEL = ("KerasHub layers at our exact size (one tied ReversibleEmbedding, sinusoidal positions, no "
              "attention-weight dropout; our parameter count), our loss and paper_optimizer: like for like")
KERAS_IO_LABEL = ("KerasHub layers, keras-io architecture (untied Dense output, learned positions; ~11.9M "
                  "parameters), stock Adam, no label smoothing")
THROUGHPUT = {
    "keras-hub": KerasHub("keras-hub", KERAS_IO_LABEL, "keras-io"),
    "keras-hub-tied": KerasHub("keras-hub-tied", TIED_LABEL),
    "keras-hub-bf16": KerasHub("keras-hub-bf16", "keras-io architecture, mixed_bfloat16", "keras-io",
                               policy="mixed_bfloat16"),
    "keras-hub-tied-bf16": KerasHub("keras-hub-tied-bf16", "KerasHub layers at our exact size, mixed_bfloat16",
                                    policy="mixed_bfloat16"),
}
