"""The KerasHub contenders of benchmarks/decode.py: `keras_hub.samplers.GreedySampler` /
`BeamSampler` under `tf.function(jit_compile=True)`, driving KerasHub's own decoder layers (the
like-for-like KerasHub-layer model of _contender_keras_hub.py, random weights) and our model's step
API; see decode.py's docstring for what each contender is."""

import numpy as np
from keras import ops

from keras_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


def banned_mask(vocabulary_size):
    ids = np.arange(vocabulary_size)
    return ops.convert_to_tensor(np.isin(ids, [PAD_ID, BOS_ID, EOS_ID]))


def build_keras_hub_model(model, vocabulary_size):
    """The like-for-like KerasHub-layer model (_contender_keras_hub, "tied") at `model`'s size."""
    from benchmarks._contender_keras_hub import KerasHub

    size = {"vocab": vocabulary_size, "d_model": model.d_model, "layers": model.num_decoder_layers,
            "heads": model.num_heads, "d_ff": model.d_ff, "dropout": 0.1}
    return KerasHub().build(size)


def keras_hub_contenders(model, source_ids, args):
    """KerasHub samplers driving our model, compiled with XLA as KerasHub's generate() does."""
    import keras_hub
    import tensorflow as tf

    banned = banned_mask(args.vocabulary_size)
    length = args.steps + 1  # BOS + generated tokens

    def prompt_for(rows):
        prompt = np.zeros((rows, length), "int32")
        prompt[:, 0] = BOS_ID
        return tf.constant(prompt)

    def forbid(logits):
        return ops.where(banned, ops.cast(float("-inf"), logits.dtype), logits)

    def with_search_step(sampler, beams):
        """next() over the model's step API, the one our searches drive."""

        def run(source_ids):
            # One cache row per beam (beam_size=1 on repeated sources), which
            # BeamSampler reorders itself; our beam search shares a cache
            # between a sentence's beams instead.
            decoder = model.incremental_decoder(
                ops.repeat(source_ids, beams, axis=0), buffer_length=length - 1, jit_compile=True
            )
            rows = ops.shape(source_ids)[0]

            def next_token_logits(prompt, cache, index):
                logits, cache = decoder.step(cache, prompt[:, index - 1], index - 1)
                return forbid(logits), None, cache

            # BeamSampler repeats the cache itself; the decoder's inputs already are.
            cache = decoder.initial_state
            if beams > 1:
                cache = tuple(c[::beams] for c in cache)
            return sampler(next_token_logits, prompt_for(rows), cache=cache, index=1)

        return run

    def with_keras_hub_layers(sampler, beams):
        """KerasHub's own TransformerEncoder/TransformerDecoder layers and their caches.

        The self-attention cache is (batch, layers, 2, length, heads, depth),
        KerasHub's convention for its models; the cross-attention caches are
        computed once and captured, not carried (and reordered) in the loop.
        """
        hub = keras_hub_model

        def run(source_ids):
            x, padding = hub.encode(source_ids, training=False)
            memory = ops.repeat(x, beams, axis=0) if beams > 1 else x
            padding = ops.repeat(padding, beams, axis=0) if beams > 1 else padding
            rows = ops.shape(memory)[0]
            heads, depth = hub.num_heads, hub.d_model // hub.num_heads
            first = ops.zeros((rows, 1, hub.d_model))
            cross = []
            for layer in hub.decoders:
                _, _, cache = layer(
                    first, memory, encoder_padding_mask=padding,
                    self_attention_cache=ops.zeros((rows, 2, 1, heads, depth)),
                    self_attention_cache_update_index=0,
                    cross_attention_cache=ops.zeros((rows, 2, ops.shape(memory)[1], heads, depth)),
                    cross_attention_cache_update_index=0,
                )
                cross.append(cache)

            def next_token_logits(prompt, cache, index):
                tokens = ops.expand_dims(ops.take(prompt, index - 1, axis=1), 1)
                h = hub.embed(tokens, "target", start_index=index - 1, training=False)
                updated = []
                for i, layer in enumerate(hub.decoders):
                    h, layer_cache, _ = layer(
                        h, memory, encoder_padding_mask=padding,
                        self_attention_cache=cache[:, i], self_attention_cache_update_index=index - 1,
                        cross_attention_cache=cross[i], cross_attention_cache_update_index=None,
                    )
                    updated.append(layer_cache)
                return forbid(hub.output_logits(h)[:, 0]), None, ops.stack(updated, axis=1)

            batch = ops.shape(source_ids)[0]
            cache = ops.zeros((batch, len(hub.decoders), 2, length - 1, heads, depth))
            return sampler(next_token_logits, prompt_for(batch), cache=cache, index=1)

        return run

    def compiled(run):
        function = tf.function(run, jit_compile=True, autograph=False)
        return lambda: function(source_ids)

    keras_hub_model = build_keras_hub_model(model, args.vocabulary_size)
    beam = keras_hub.samplers.BeamSampler(num_beams=args.beam_size)
    greedy = keras_hub.samplers.GreedySampler()
    return [
        ("KerasHub GreedySampler + KerasHub layers, XLA", "greedy", compiled(with_keras_hub_layers(greedy, 1))),
        ("KerasHub GreedySampler + model step API, XLA", "greedy", compiled(with_search_step(greedy, 1))),
        (f"KerasHub BeamSampler({args.beam_size}) + KerasHub layers, XLA", "beam",
         compiled(with_keras_hub_layers(beam, args.beam_size))),
        (f"KerasHub BeamSampler({args.beam_size}) + model step API, XLA", "beam",
         compiled(with_search_step(beam, args.beam_size))),
    ]
