"""Checks of the searches' options, each written once: ints, alpha, the
length penalty (`LENGTH_PENALTIES`), the sampling options, the limit rule
(`LIMIT_RULES`) and the special ids.
Used by the searches, `score_translations`, `Translator` and the exports."""

import math

from keras_transformer.decoding.penalty import LENGTH_PENALTIES

# What becomes of a hypothesis at its length limit without EOS (see
# `keras_transformer.decoding.search`).
LIMIT_RULES = ("fallback", "force_eos", "finish")


def check_int(name, value, minimum):
    """`value` if it is an int >= minimum, else a ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return value


def check_alpha(alpha):
    """The length penalty's exponent as a float: finite and >= 0."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"`alpha` must be a finite number >= 0, got {alpha!r}.")
    return float(alpha)


def check_sampling_options(temperature=1.0, top_k=0, top_p=1.0, seed=None):
    """Raises a ValueError naming the first bad sampling option (also run
    by `Translator` at construction, before any search)."""
    check_int("top_k", top_k, 0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0 \
            or not math.isfinite(temperature):
        raise ValueError(f"`temperature` must be a finite number > 0, got {temperature!r}.")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"`top_p` must be a number in (0, 1], got {top_p!r}.")
    if seed is not None:
        check_int("seed", seed, 0)


def check_length_penalty(length_penalty):
    """`length_penalty` if it names a rule of `LENGTH_PENALTIES`, else a ValueError naming it."""
    if not isinstance(length_penalty, str) or length_penalty not in LENGTH_PENALTIES:
        raise ValueError(f"`length_penalty` must be one of {', '.join(map(repr, LENGTH_PENALTIES))}, "
                         f"got {length_penalty!r}.")
    return length_penalty


def check_limit_rule(limit_rule):
    if limit_rule not in LIMIT_RULES:
        raise ValueError(f"`limit_rule` must be one of {', '.join(map(repr, LIMIT_RULES))}, got {limit_rule!r}.")
    return limit_rule


def check_search_options(model, max_extra_length, max_output_length, min_length, bos_id, eos_id, pad_id,
                         limit_rule="fallback"):
    check_limit_rule(limit_rule)
    check_int("max_extra_length", max_extra_length, 0)
    check_int("min_length", min_length, 0)
    if max_output_length is not None:
        check_int("max_output_length", max_output_length, 1)
    vocabulary_size = model.vocabulary_size
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        check_int(name, value, 0)
        if value >= vocabulary_size:
            raise ValueError(
                f"`{name}`={value} is outside the model's vocabulary of {vocabulary_size} ids."
            )
    if len({bos_id, eos_id, pad_id}) != 3:
        raise ValueError(
            f"`bos_id`, `eos_id` and `pad_id` must differ, got {bos_id}, {eos_id}, {pad_id}."
        )
    if pad_id != model.pad_id:
        raise ValueError(f"`pad_id`={pad_id} differs from the model's pad_id={model.pad_id}.")
    if getattr(model, "positional_encoding", None) == "learned":
        # Learned positions exist only up to the model's position table (its max_length).
        max_output_length = (model.max_length if max_output_length is None
                             else min(max_output_length, model.max_length))
    return max_output_length
