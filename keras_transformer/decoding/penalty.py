"""The length penalties that rank finished hypotheses, shared by beam search
and scoring: score = log P / length_penalty(|Y|), |Y| the generated tokens
counting EOS.

- "gnmt" (the paper's, GNMT's and tensor2tensor's): ((5 + |Y|) / 6) ** alpha.
- "length" (Marian's, Transformers' `length_penalty` and CTranslate2's):
  |Y| ** alpha; alpha 1.0 ranks by the mean log-probability per token.
  |Y| counts EOS as Transformers' `_beam_search` does (it divides by
  cur_len + 1 - decoder_prompt_len, the token just chosen included) and as
  CTranslate2's translator does (its `BeamSearch` keeps EOS in the
  hypothesis while scoring, `include_eos_in_hypotheses`, and strips it
  afterwards). An empty hypothesis without EOS (scoring only) counts 1.
"""

from keras import ops

# The rules' names, as `decoding.length_penalty` and `--length-penalty` take them.
LENGTH_PENALTIES = ("gnmt", "length")


def length_penalty(length, alpha=0.6, rule="gnmt"):
    """The divisor of log P under `rule` (`LENGTH_PENALTIES`) for `length`
    tokens, EOS included (float32, elementwise); alpha 0 gives 1 under both."""
    length = ops.cast(length, "float32")
    alpha = ops.cast(alpha, "float32")
    if rule == "gnmt":
        return ops.power((5.0 + length) / 6.0, alpha)
    if rule == "length":
        return ops.power(ops.maximum(length, 1.0), alpha)
    raise ValueError(f"`length_penalty` must be one of {', '.join(map(repr, LENGTH_PENALTIES))}, got {rule!r}.")
