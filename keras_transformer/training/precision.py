"""Numeric precision: the recipes' choice for this machine's CPU, and a model
rebuilt under another dtype policy (a trained model decodes in float32)."""

from pathlib import Path


def cpu_has_bfloat16():
    """True when the CPU advertises bfloat16 arithmetic (AVX512-BF16 or AMX-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def choose_precision(config, assignments):
    """mixed_bfloat16 where the CPU computes in bfloat16 natively, float32 elsewhere,
    unless `assignments` (--set KEY=VALUE texts) chose training.mixed_precision;
    prints the choice and why, returns the configuration."""
    from keras_transformer import config as config_lib

    if any(a.split("=", 1)[0].strip() == "training.mixed_precision" for a in assignments):
        print(f"precision: {config['training']['mixed_precision'] or 'float32'} (--set)", flush=True)
        return config
    if cpu_has_bfloat16():
        print("precision: mixed_bfloat16 (this CPU has bfloat16 units: 1.3-1.5x more steps in "
              "benchmarks/quality.py)", flush=True)
        return config_lib.merge(config, {"training": {"mixed_precision": "mixed_bfloat16"}}, origin="recipe")
    print("precision: float32 (no bfloat16 units on this CPU, where bfloat16 would be emulated)", flush=True)
    return config


def with_dtype_policy(model, policy):
    """A copy of `model` built under the dtype policy `policy` (a name such as
    "float32" or "bfloat16"), holding its weights (cast to the policy's
    variable dtype); `model` is unchanged."""
    if not model.built:
        model.build()
    config = model.get_config()
    config["dtype"] = policy
    copy = type(model).from_config(config)
    copy.build()
    copy.set_weights(model.get_weights())
    return copy


def computing_in_float32(model):
    """`model`, or where it computes under a mixed policy (a training setting:
    float32 weights, bfloat16 or float16 products) a float32 copy. A run
    trained in mixed precision saves its model under that policy; decoded as
    saved, its texts would differ from those of its float32 SavedModel and
    its CTranslate2 float32 export (on a weak model, by a tenth of its length
    ratio: the length gate's table in benchmarks/README.md). Lower precision
    for serving is a choice made at export (`quantize="bfloat16"`)."""
    policy = model.dtype_policy
    if policy.compute_dtype == policy.variable_dtype:
        return model
    return with_dtype_policy(model, policy.variable_dtype)
