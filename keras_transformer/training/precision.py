"""The recipes' choice of numeric precision for this machine's CPU."""

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
