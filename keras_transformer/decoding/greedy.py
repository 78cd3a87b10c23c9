"""Searches with one hypothesis per sentence: greedy search and random
sampling (conventions in `keras_transformer.decoding.search`)."""

import numpy as np
from keras import ops

from keras_transformer.decoding import compiled, phases
from keras_transformer.decoding.candidates import _NEG_INF, _eos_only, _keep_a_candidate, _mask_special_tokens
from keras_transformer.decoding.constraints import _Constraints
from keras_transformer.decoding.inputs import check_inputs, check_prefix
from keras_transformer.decoding.options import check_int, check_sampling_options, check_search_options
from keras_transformer.models.incremental import batch_size_of, write_column
from keras_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID


# Why not KerasHub's samplers (keras_hub.samplers.RandomSampler, TopKSampler,
# TopPSampler)? Their `get_next_token(probabilities)` draws with
# `keras.random.categorical(seed=self.seed_generator)`, and keras.random takes
# only an int or a `SeedGenerator` (a variable), never a seed tensor. Inside
# this search's `ops.while_loop`, compiled as `compiled.py` does:
# - JAX (`jax.jit` in a StatelessScope): the generator's advance is not
#   carried through our loop (their `Sampler.run_loop` threads it through
#   their own loop only); tried with keras-hub 0.32.0, every step drew the
#   same token and every call the same draws;
# - TensorFlow: the seed is a variable that each call advances, so a seed
#   cannot reproduce a call, and an exported graph would fix it at export;
# - PyTorch: their draw builds a torch.Generator from a concrete seed.
# Their combined top-k + top-p (`TopPSampler(k=...)`) also measures p against
# the whole distribution's mass of the k best, where ours (as HF
# transformers' warpers) renormalises the k best first. So the draw below is
# ours: the same semantics otherwise (temperature before the cuts, a token
# kept while the mass before it is below p), the CDF inverted at uniforms
# that numpy draws from the seed and that enter the compiled search as an
# input: one seed gives the same random numbers on every backend, in a
# plain graph and under XLA, and a new seed needs no recompilation.
def _sampled_tokens(allowed, uniforms, temperature, top_k, top_p):
    """One token per row of (rows, V) `allowed` logits (-inf: not allowed),
    drawn from softmax(logits / temperature) restricted to the `top_k` best
    and then to the smallest set of best tokens whose probability reaches
    `top_p`, by inverting the distribution's CDF at `uniforms` (rows,) in (0, 1)."""
    scaled = allowed / temperature
    neg_inf = ops.cast(_NEG_INF, "float32")
    if top_k > 0:
        kth = ops.top_k(scaled, k=min(top_k, scaled.shape[-1]), sorted=True)[0][:, -1:]
        scaled = ops.where(ops.less(scaled, kth), neg_inf, scaled)
    if top_p < 1.0:
        ordered = -ops.sort(-scaled, axis=-1)  # best first
        probabilities = ops.softmax(ordered, axis=-1)
        before = ops.cumsum(probabilities, axis=-1) - probabilities  # mass of the better tokens
        # The best token always stays; a token stays while the mass before it is below top_p.
        kept = ops.logical_or(ops.less(before, top_p), ops.equal(ops.arange(scaled.shape[-1]), 0))
        threshold = ops.min(ops.where(kept, ordered, float("inf")), axis=-1, keepdims=True)
        scaled = ops.where(ops.less(scaled, threshold), neg_inf, scaled)
    cdf = ops.cumsum(ops.softmax(scaled, axis=-1), axis=-1)
    target = ops.expand_dims(uniforms, 1) * cdf[:, -1:]
    # The first token whose CDF reaches the target (a zero-probability token
    # never does first: the CDF does not rise there, and targets exceed 0).
    return ops.cast(ops.argmax(ops.cast(ops.greater_equal(cdf, target), "int32"), axis=-1), "int32")


def _greedy(
    model, source_ids, max_extra_length, max_output_length, min_length, bos_id, eos_id, pad_id, use_cache,
    jit_compile=False, prefix_ids=None, no_repeat_ngram_size=0, uniforms=None, temperature=1.0, top_k=0,
    top_p=1.0, limit_rule="fallback",
):
    """Greedy search, or random sampling when `uniforms` (batch, buffer) is given."""
    source_ids = ops.cast(source_ids, "int32")
    limits, buffer_length, buffer_bound = phases._lengths_and_buffer(source_ids, pad_id, max_extra_length,
                                                                     max_output_length)
    decoder = phases._decoder(model, source_ids, 1, buffer_length, use_cache, jit_compile)
    constraints = _Constraints(prefix_ids, no_repeat_ngram_size, 1, model.vocabulary_size, pad_id, eos_id)
    batch = batch_size_of(source_ids)
    vocabulary = ops.arange(model.vocabulary_size, dtype="int32")

    def loop(decoder, sentences):
        """cond and body over the sentences `sentences` (None: the whole batch)."""
        sentence_limits = limits if sentences is None else ops.take(limits, sentences, axis=0)
        sentence_constraints = constraints if sentences is None else constraints.select(sentences)
        sentence_uniforms = uniforms
        if uniforms is not None and sentences is not None:
            sentence_uniforms = ops.take(uniforms, sentences, axis=0)

        def cond(step, tokens, last_tokens, finished, scores, lengths, state):
            return ops.logical_and(ops.less(step, buffer_length), ops.logical_not(ops.all(finished)))

        def body(step, tokens, last_tokens, finished, scores, lengths, state):
            logits, state = decoder.step(state, last_tokens, step)
            # log P(token) = logit - logsumexp(logits), over the whole vocabulary.
            normalizer = ops.logsumexp(logits, axis=-1)
            allowed = sentence_constraints.allowed(step, tokens, logits)
            constrained = allowed is not None
            allowed = logits if allowed is None else allowed
            allowed = _mask_special_tokens(allowed, vocabulary, step, bos_id, eos_id, pad_id, min_length)
            if constrained:
                allowed = _keep_a_candidate(allowed, logits, eos_id)
            if limit_rule == "force_eos":
                allowed = _eos_only(allowed, logits, ops.greater_equal(step + 1, sentence_limits), eos_id)
            if uniforms is None:
                next_tokens = ops.cast(ops.argmax(allowed, axis=-1), "int32")
            else:
                column = ops.take(sentence_uniforms, ops.minimum(step, ops.shape(sentence_uniforms)[1] - 1), axis=1)
                next_tokens = _sampled_tokens(allowed, column, temperature, top_k, top_p)
            token_logits = ops.take_along_axis(logits, ops.expand_dims(next_tokens, 1), axis=1)[:, 0]
            alive = ops.logical_not(finished)
            next_tokens = ops.where(alive, next_tokens, pad_id)
            scores = scores + ops.where(alive, token_logits - normalizer, 0.0)
            lengths = lengths + ops.cast(alive, "int32")
            tokens = write_column(tokens, step, next_tokens)
            finished = ops.logical_or(
                finished,
                ops.logical_or(ops.equal(next_tokens, eos_id), ops.greater_equal(step + 1, sentence_limits)),
            )
            return step + 1, tokens, next_tokens, finished, scores, lengths, state

        return cond, body

    loop_state = (
        ops.convert_to_tensor(0, dtype="int32"),
        # pad_id from the start: a sentence that is done writes pad_id at
        # later steps, or (dropped between phases) nothing.
        ops.full((batch, buffer_length), pad_id, dtype="int32"),
        ops.full((batch,), bos_id, dtype="int32"),
        ops.zeros((batch,), dtype="bool"),
        ops.zeros((batch,), dtype="float32"),
        ops.zeros((batch,), dtype="int32"),
    )
    # Between phases, only the sentences not finished go on (where shapes may change).
    compaction = phases.compaction(jit_compile, 1, (False,) * 5, lambda state: state[3])
    _, tokens, _, _, scores, lengths, _ = phases._while_loop_in_phases(
        loop, loop_state, decoder, buffer_length, compaction, buffer_bound
    )
    return {"ids": tokens, "scores": scores, "log_probs": scores, "lengths": lengths}


def greedy_search(
    model,
    source_ids,
    *,
    max_extra_length=50,
    max_output_length=None,
    min_length=0,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    use_cache=True,
    compile=True,
    jit_compile=False,
    prefix_ids=None,
    no_repeat_ngram_size=0,
    limit_rule="fallback",
):
    """Greedy decoding: the most probable token at every step.

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: (batch, source_length) int ids padded with `pad_id`.
        max_extra_length: a sentence stops after its non-pad source length
            plus this many tokens.
        max_output_length: optional cap on every output length (and on the buffer).
        min_length: forbid EOS until this many tokens were generated (the
            benchmark uses it to force a fixed number of steps).
        bos_id, eos_id, pad_id: special ids (those of `SubwordTokenizer`).
        use_cache: False re-runs the whole decoder at every step (slow; a
            reference for tests and benchmarks).
        compile: compile the whole search (`tf.function` / `jax.jit`); the
            compiled function is kept per model and options.
        jit_compile: on TensorFlow, compile with XLA (faster on CPU; not for
            SavedModels served by TF Serving, which runs without XLA). Inside
            a caller's graph, True emits XLA-only ops (the caller must
            compile with XLA).
        prefix_ids: optional (batch, width) ids each output must start with,
            padded with `pad_id` (a row of pads: no prefix). The prefix
            counts in the output, its length and its log-probability.
        no_repeat_ngram_size: n > 0 forbids any n-gram from appearing twice
            in an output (fairseq's option; EOS and forced prefix tokens
            are exempt). Where blocking and `min_length` leave a step no
            token at all, EOS is allowed.
        limit_rule: what becomes of an output reaching its length limit
            without EOS, one of `LIMIT_RULES` (see the module docstring):
            "fallback" (default) and "finish" keep it as it is;
            "force_eos" allows only EOS at the last position (it wins over
            `min_length` and a longer prefix).

    Returns:
        A dict of tensors: "ids" (batch, buffer_length) int32, the tokens
        with EOS and then `pad_id`; "scores" and "log_probs" (batch,) the sum
        of the tokens' log-probabilities; "lengths" (batch,) tokens generated,
        EOS included.
    """
    max_output_length = check_search_options(model, max_extra_length, max_output_length, min_length, bos_id,
                                             eos_id, pad_id,
                                limit_rule)
    return _run_one_hypothesis(
        model, source_ids, prefix_ids, None, dict(
            max_extra_length=max_extra_length, max_output_length=max_output_length, min_length=min_length,
            bos_id=bos_id,
            eos_id=eos_id, pad_id=pad_id, use_cache=use_cache, jit_compile=bool(jit_compile),
            no_repeat_ngram_size=no_repeat_ngram_size, limit_rule=limit_rule,
        ), compile, jit_compile,
    )


def _run_one_hypothesis(model, source_ids, prefix_ids, uniforms, options, compile, jit_compile, sampling=None):
    """Greedy search, or sampling with `uniforms` and `sampling` options, compiled per option set."""
    check_int("no_repeat_ngram_size", options["no_repeat_ngram_size"], 0)
    source_ids, _ = check_inputs(model, compiled.as_ids("source_ids", source_ids), pad_id=options["pad_id"])
    extra_inputs = () if uniforms is None else (uniforms,)
    extra_inputs += check_prefix(
        prefix_ids, source_ids, options["bos_id"], options["eos_id"], options["pad_id"], model.vocabulary_size
    )
    sampling = sampling or {}

    def search(model, source_ids, *inputs):
        uniforms = inputs[0] if sampling else None
        prefix = inputs[-1] if len(inputs) > bool(sampling) else None
        return _greedy(model, source_ids, prefix_ids=prefix, uniforms=uniforms, **options, **sampling)

    key = ("one hypothesis", tuple(sorted(options.items())), tuple(sorted(sampling.items())), jit_compile,
           len(extra_inputs), phases.PHASE_CAPACITIES)
    return compiled.run(model, source_ids, key, search, compile, jit_compile, extra_inputs, phased=True)


def sampling_search(
    model,
    source_ids,
    *,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=None,
    max_extra_length=50,
    max_output_length=None,
    min_length=0,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    pad_id=PAD_ID,
    use_cache=True,
    compile=True,
    jit_compile=False,
    prefix_ids=None,
    no_repeat_ngram_size=0,
    limit_rule="fallback",
):
    """Random sampling: each token drawn from the model's distribution
    (for back-translation, diverse outputs).

    The distribution is softmax(logits / temperature), cut to the `top_k`
    best tokens (0: all) and then to the nucleus: the smallest set of best
    tokens whose probability reaches `top_p` (1: all). Pad, BOS and banned
    tokens are never drawn, as in the other searches. The random numbers
    come from numpy's generator seeded with `seed` (None: fresh entropy) and
    enter the compiled search as an input, so the same seed gives the same
    outputs, and a new seed needs no recompilation.

    Arguments as for `greedy_search`, plus those above. Returns what
    `greedy_search` returns; "scores" and "log_probs" are the sums of the
    model's log-probabilities of the drawn tokens (before temperature and
    cuts).
    """
    max_output_length = check_search_options(model, max_extra_length, max_output_length, min_length, bos_id,
                                             eos_id, pad_id,
                                limit_rule)
    check_sampling_options(temperature, top_k, top_p, seed)
    rows, width = compiled.as_ids("source_ids", source_ids).shape
    if rows is None or width is None:
        raise ValueError("sampling_search needs `source_ids` of a known shape (it draws its random numbers first).")
    columns = (width + max_extra_length if max_output_length is None
               else min(width + max_extra_length, max_output_length))
    # Uniforms in (0, 1): a zero would select a token of zero probability.
    uniforms = np.random.default_rng(seed).random((rows, max(columns, 1)))
    uniforms = np.clip(uniforms, np.finfo("float32").tiny, 1.0).astype("float32")
    return _run_one_hypothesis(
        model, source_ids, prefix_ids, uniforms, dict(
            max_extra_length=max_extra_length, max_output_length=max_output_length, min_length=min_length,
            bos_id=bos_id,
            eos_id=eos_id, pad_id=pad_id, use_cache=use_cache, jit_compile=bool(jit_compile),
            no_repeat_ngram_size=no_repeat_ngram_size, limit_rule=limit_rule,
        ), compile, jit_compile, sampling=dict(temperature=float(temperature), top_k=top_k, top_p=float(top_p)),
    )
