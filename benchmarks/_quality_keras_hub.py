"""The KerasHub-layer contender of benchmarks/quality.py (TensorFlow backend).

The architecture of the keras-io example "English-to-Spanish translation with
KerasHub": `TokenAndPositionEmbedding` (learned positions) for source and
target, KerasHub `TransformerEncoder` / `TransformerDecoder` layers (post-norm;
their one `dropout` also drops attention weights), an untied `Dense` output.
The example derives padding masks from `mask_zero=True`; here they are passed
explicitly (the same masks, without KerasHub's warnings about both).

Decoding: `keras_hub.samplers.BeamSampler` over the decoder layers' own caches
(self-attention cache carried in the loop as (rows, layers, 2, length, heads,
depth), cross-attention caches computed once per batch), compiled with
`tf.function(jit_compile=True)` as KerasHub's `generate()` compiles its
samplers.
"""

import json
import time
import warnings

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from keras import ops

from keras_transformer import runs
from keras_transformer.data import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer, make_dataset
from keras_transformer.training import LabelSmoothedCrossEntropy, NoamSchedule, paper_optimizer

MAX_POSITIONS = 256  # learned position table: sources up to 128, outputs up to 128 + 50


class KerasHubTranslator(keras.Model):
    def __init__(self, vocabulary_size, d_model, num_heads, d_ff, num_layers, dropout, norm_first=False,
                 **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads = d_model, num_heads
        self.source_embedding = keras_hub.layers.TokenAndPositionEmbedding(vocabulary_size, MAX_POSITIONS, d_model)
        self.target_embedding = keras_hub.layers.TokenAndPositionEmbedding(vocabulary_size, MAX_POSITIONS, d_model)
        self.encoders = [keras_hub.layers.TransformerEncoder(d_ff, num_heads, dropout=dropout,
                                                            normalize_first=norm_first)
                         for _ in range(num_layers)]
        self.decoders = [keras_hub.layers.TransformerDecoder(d_ff, num_heads, dropout=dropout,
                                                            normalize_first=norm_first)
                         for _ in range(num_layers)]
        # Pre-LN stacks end in a layer norm (KerasHub's layers leave it to the model).
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-5) if norm_first else None
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-5) if norm_first else None
        self.projection = keras.layers.Dense(vocabulary_size)

    def output_logits(self, y):
        return self.projection(y if self.decoder_norm is None else self.decoder_norm(y))

    def encode(self, source, training=None):
        padding = ops.not_equal(source, PAD_ID)
        x = self.source_embedding(source)
        for layer in self.encoders:
            x = layer(x, padding_mask=padding, training=training)
        return (x if self.encoder_norm is None else self.encoder_norm(x)), padding

    def call(self, inputs, training=None):
        memory, source_padding = self.encode(inputs["source"], training)
        target = inputs["target"]
        y = self.target_embedding(target)
        for layer in self.decoders:
            y = layer(y, memory, decoder_padding_mask=ops.not_equal(target, PAD_ID),
                      encoder_padding_mask=source_padding, training=training)
        return self.output_logits(y)


def beam_generate(model, sampler, source_ids, output_length):
    """Best beam of `sampler` for each source row: (rows, output_length + 1) ids, BOS first."""
    beams = sampler.num_beams
    heads, depth = model.num_heads, model.d_model // model.num_heads
    memory, padding = model.encode(source_ids, training=False)
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
        tokens = ops.expand_dims(ops.take(prompt, index - 1, axis=1), 1)
        h = model.target_embedding(tokens, start_index=index - 1)
        updated = []
        for i, layer in enumerate(model.decoders):
            h, layer_cache, _ = layer(
                h, memory, encoder_padding_mask=padding,
                self_attention_cache=cache[:, i], self_attention_cache_update_index=index - 1,
                cross_attention_cache=cross[i], cross_attention_cache_update_index=None, training=False,
            )
            updated.append(layer_cache)
        return ops.cast(model.output_logits(h)[:, 0], "float32"), None, ops.stack(updated, axis=1)

    batch = ops.shape(source_ids)[0]
    prompt = tf.concat([tf.fill([batch, 1], BOS_ID), tf.zeros([batch, output_length], tf.int32)], axis=1)
    cache = ops.zeros((batch, len(model.decoders), 2, output_length, heads, depth), dtype)
    return sampler(next_token_logits, prompt, cache=cache, index=1, stop_token_ids=[EOS_ID])


def translate(model, tokenizer, sources, config, beams=4):
    """Sorted-by-length batches; outputs <= padded source width + max_extra_length tokens."""
    # Priming the cross-attention caches runs a 1-slot self-attention: Keras
    # warns about a softmax over one key, which is what that call means.
    warnings.filterwarnings("ignore", message="You are using a softmax over axis")
    sampler = keras_hub.samplers.BeamSampler(num_beams=beams)
    generate = tf.function(lambda ids, length: beam_generate(model, sampler, ids, length),
                           jit_compile=True, autograph=False, reduce_retracing=False)
    cut = config["max_length"] - 1
    ids = [row[:cut] + [EOS_ID] for row in tokenizer.tokenize(sources).to_list()]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    outputs = [None] * len(ids)
    batch_size = config["decode_batch"]
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = -(-max(len(ids[i]) for i in rows) // 8) * 8
        batch = np.full((len(rows), width), PAD_ID, "int32")
        for position, index in enumerate(rows):
            batch[position, :len(ids[index])] = ids[index]
        length = min(width + config["max_extra_length"], MAX_POSITIONS - 1)
        # `length` is a Python int: one compiled program per (rows, width, length).
        result = generate(tf.constant(batch), length).numpy()[:, 1:]
        for position, index in enumerate(rows):
            outputs[index] = result[position]
        print(f"decoded {min(start + batch_size, len(order))}/{len(order)}", flush=True)
    texts = tokenizer.detokenize(np.stack([np.pad(o, (0, MAX_POSITIONS - len(o))) for o in outputs]))
    return [t.decode("utf-8") for t in texts.numpy()]


def make_optimizer(settings, d_model):
    """(optimizer, description) for the `optimizer` setting: "densified" (default) or "stock".

    "densified": `paper_optimizer`, the Adam ours trains with (TransformerAdam:
    an embedding lookup's sparse gradient is made dense before the update).
    Keras' stock Adam, "stock", squares the slices of a row repeated in a batch
    one by one on TensorFlow, so its update of the embeddings differs from
    the dense one by more than the weights move: what a KerasHub user gets
    today, kept as a labelled row. Both use the Noam schedule below.
    """
    choice = settings.get("optimizer", "densified")
    warmup, scale = settings["warmup_steps"], settings["learning_rate_scale"]
    if choice == "densified":
        return (paper_optimizer(d_model, warmup_steps=warmup, scale=scale),
                "TransformerAdam(0.9, 0.98, 1e-9) (densified sparse gradients, as ours), NoamSchedule")
    if choice == "stock":
        schedule = NoamSchedule(d_model, warmup_steps=warmup, scale=scale)
        return (keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                "stock keras.optimizers.Adam(0.9, 0.98, 1e-9), NoamSchedule")
    raise ValueError(f"optimizer setting {choice!r}: expected 'densified' or 'stock'")


def train_and_decode(work, out, minutes, settings, seed, config):
    from benchmarks._quality_common import Clock as _Clock, count_trained_tokens, read_pairs, versions

    keras.utils.set_random_seed(seed)
    if settings.get("mixed_precision", "none") != "none":
        keras.config.set_dtype_policy(settings["mixed_precision"])
    data = work / "data"
    tokenizer = SubwordTokenizer.load(str(data / "tokenizer.model"))
    pairs = read_pairs(data / "train.jsonl.gz")
    # The length buckets ours gets from runs.train's default (model.fit compiles
    # this model's step as it compiles ours), so both train on the same batches.
    boundaries = runs.bucket_boundaries({"data": {"bucket_width": None, "max_length": config["max_length"]}})
    dataset = make_dataset(pairs, tokenizer, tokens_per_batch=settings["tokens_per_batch"],
                           max_length=config["max_length"], training=True, seed=seed, repeat=True,
                           bucket_boundaries=boundaries)
    model = KerasHubTranslator(tokenizer.vocabulary_size, config["d_model"], config["num_heads"], config["d_ff"],
                               config["num_layers"], config["dropout"], norm_first=settings["norm_first"])
    optimizer, optimizer_used = make_optimizer(settings, config["d_model"])
    model.compile(optimizer=optimizer, loss=LabelSmoothedCrossEntropy(0.1))

    class TimeLimit(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.clock = _Clock(minutes)

        def on_train_batch_end(self, batch, logs=None):
            if self.clock.step(logs, batch):
                self.model.stop_training = True

    limit = TimeLimit()  # constructed just before fit, as runs.train's
    # shuffle=False: make_dataset shuffles (Keras would only warn that it ignores this).
    model.fit(dataset, epochs=1, steps_per_epoch=10**8, callbacks=[limit], shuffle=False, verbose=0)
    print(f"trained {limit.clock.steps} steps in {limit.clock.seconds / 60:.2f} min", flush=True)

    _, target_tokens = count_trained_tokens(pairs, tokenizer, limit.clock.steps, settings["tokens_per_batch"], seed,
                                            boundaries)
    sources = [s for s, _ in read_pairs(data / "test.jsonl.gz")]
    start = time.time()
    hypotheses = translate(model, tokenizer, sources, config)
    decode_seconds = time.time() - start
    (out / "hypotheses.json").write_text(json.dumps(hypotheses, ensure_ascii=False))
    return {
        "steps": limit.clock.steps, "train_seconds": limit.clock.seconds, "decode_seconds": decode_seconds,
        "target_tokens": target_tokens, "search": "KerasHub BeamSampler(4), cached, XLA, no length penalty",
        "settings": {"optimizer_used": optimizer_used, "loss": "label smoothing 0.1",
                     "checkpoint_every_steps": None, "parameters": model.count_params(),
                     "bucket_boundaries": boundaries or "make_dataset default (geometric)"},
        "versions": {**versions(), "keras_backend": keras.backend.backend()},
    }
