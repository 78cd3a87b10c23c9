"""The learning-rate schedule of "Attention Is All You Need" (section 5.3)."""

import keras
from keras import ops


def _check_positive(name, value, integer):
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"NoamSchedule: `{name}` must be {kind} > 0, got {value!r}.")
    if integer and int(value) != value:
        raise TypeError(f"NoamSchedule: `{name}` must be {kind} > 0, got {value!r}.")
    if value <= 0:
        raise ValueError(f"NoamSchedule: `{name}` must be {kind} > 0, got {value!r}.")


@keras.saving.register_keras_serializable(package="keras_transformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`.

    The rate grows linearly for `warmup_steps` updates, peaks at
    `scale * (d_model * warmup_steps)^-0.5` and then decays as `step^-0.5`.

    `step` counts optimizer *updates* from 1. A Keras optimizer calls the
    schedule with its raw iteration counter, which starts at 0 and, with
    `gradient_accumulation_steps=N`, advances once per micro-batch (the update
    happens when the counter is `k * N - 1`). So the schedule uses
    `step = iterations // gradient_accumulation_steps + 1`, which is `k` at the
    k-th update, the same step Adam's bias correction uses.

    Args:
        d_model: model width (the paper's d_model, e.g. 512).
        warmup_steps: number of linear warm-up updates (paper: 4000).
        scale: constant factor on the whole rate (1.0 in the paper).
        gradient_accumulation_steps: micro-batches per update; set it to the
            optimizer's `gradient_accumulation_steps` (None or 1 = none).
    """

    def __init__(
        self, d_model, warmup_steps=4000, scale=1.0, gradient_accumulation_steps=1
    ):
        _check_positive("d_model", d_model, integer=True)
        _check_positive("warmup_steps", warmup_steps, integer=True)
        _check_positive("scale", scale, integer=False)
        if gradient_accumulation_steps is None:
            gradient_accumulation_steps = 1
        _check_positive(
            "gradient_accumulation_steps", gradient_accumulation_steps, integer=True
        )
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)
        self.gradient_accumulation_steps = int(gradient_accumulation_steps)

    def __call__(self, step):
        iterations = ops.convert_to_tensor(step)
        if "int" not in keras.backend.standardize_dtype(iterations.dtype):
            iterations = ops.cast(iterations, "int32")
        if self.gradient_accumulation_steps > 1:
            iterations = ops.floor_divide(
                iterations, self.gradient_accumulation_steps
            )
        update = ops.cast(iterations + 1, "float32")
        warmup = float(self.warmup_steps)
        rate = ops.minimum(ops.rsqrt(update), update * warmup**-1.5)
        return (self.scale * self.d_model**-0.5) * rate

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
        }
