"""The optimizer of "Attention Is All You Need" (section 5.3)."""

import keras

from keras_transformer.training.tensorflow_kernels import densify_sparse_gradients, fused_adam_update
from keras_transformer.training.schedule import NoamSchedule


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` with the paper's constants as defaults and
    sparse gradients made dense before the update.

    On the TensorFlow backend an embedding lookup yields an `IndexedSlices`
    gradient, and Keras 3.15's Adam squares its slices one by one: a row that
    occurs k times in a batch gets the sum of k squared slices as its second
    moment instead of the square of their sum, so TensorFlow trained
    embeddings differently from JAX and torch. Densifying first gives the
    same update on all backends (a no-op on JAX and torch).

    On TensorFlow the update of each float32 variable runs as one fused
    `ResourceApplyAdam` kernel (the same arithmetic as Keras' Adam in about
    0.4x the time; tests compare the two); AMSGrad and the other backends use
    Keras' own update.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.98, epsilon=1e-9, **kwargs):
        super().__init__(
            learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, **kwargs
        )

    def apply(self, grads, trainable_variables=None):
        return super().apply(densify_sparse_gradients(list(grads)), trainable_variables)

    def update_step(self, gradient, variable, learning_rate):
        if not fused_adam_update(self, gradient, variable, learning_rate):
            super().update_step(gradient, variable, learning_rate)


def paper_optimizer(
    d_model,
    warmup_steps=4000,
    scale=1.0,
    gradient_accumulation_steps=None,
    beta_1=0.9,
    beta_2=0.98,
    epsilon=1e-9,
    **adam_kwargs,
):
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) driven by `NoamSchedule`.

    Args:
        d_model: model width, for the schedule.
        warmup_steps: warm-up updates of the schedule (paper: 4000).
        scale: factor on the schedule's learning rate.
        gradient_accumulation_steps: None, or N >= 2 to apply one update per
            N batches (effective batch = N x tokens per batch). Keras applies
            the *mean* of the N batch gradients, and each batch gradient is
            that of the batch's token-mean loss, so every micro-batch has the
            same weight whatever its token count. That equals the gradient of
            the token mean over the N batches when the batches hold equal
            numbers of target tokens (which token-bucketed batching
            approximates) and otherwise weights tokens of sparse batches more.
            The schedule is told N, so it still counts updates, not batches.
        beta_1, beta_2, epsilon: Adam's constants (the paper's by default).
        **adam_kwargs: passed to `keras.optimizers.Adam` (e.g. `clipnorm`).

    Returns:
        A `TransformerAdam` (a `keras.optimizers.Adam`). Under a `mixed_float16` policy,
        `model.compile` wraps it in a `LossScaleOptimizer` by itself.
    """
    if "learning_rate" in adam_kwargs:
        raise TypeError(
            "paper_optimizer: `learning_rate` is set by NoamSchedule; use "
            "`scale`/`warmup_steps`, or build keras.optimizers.Adam yourself."
        )
    if gradient_accumulation_steps is None or (
        type(gradient_accumulation_steps) is int and gradient_accumulation_steps == 1
    ):
        gradient_accumulation_steps = None
    elif (
        isinstance(gradient_accumulation_steps, bool)
        or not isinstance(gradient_accumulation_steps, int)
        or gradient_accumulation_steps < 2
    ):
        raise ValueError(
            "paper_optimizer: `gradient_accumulation_steps` must be None or "
            f"an integer >= 2, got {gradient_accumulation_steps!r}."
        )
    schedule = NoamSchedule(
        d_model,
        warmup_steps=warmup_steps,
        scale=scale,
        gradient_accumulation_steps=gradient_accumulation_steps or 1,
    )
    return TransformerAdam(
        learning_rate=schedule,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        gradient_accumulation_steps=gradient_accumulation_steps,
        **adam_kwargs,
    )
