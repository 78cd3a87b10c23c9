"""Compiling a whole search once per model and options, per backend.

A `tf.function` (optionally `jit_compile=True`, XLA) on TensorFlow, `jax.jit`
on JAX (the weights passed as arguments, so new weights need no recompile);
PyTorch runs eagerly under `torch.no_grad()`. Called while a TensorFlow graph
or a JAX trace is being built (e.g. inside an export function), a search
emits plain ops into it instead.
"""

import itertools
import weakref

import keras
from keras import ops

# model -> {options: compiled function}; weak so that models can be freed.
_COMPILED = weakref.WeakKeyDictionary()


def in_trace(source_ids):
    """True while a TF graph or a JAX trace is being built."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.inside_function()
    if backend == "jax":
        import jax

        return isinstance(source_ids, jax.core.Tracer)
    return False


def compiled(model, key, search, jit_compile):
    """`search(model, source_ids) -> dict`, compiled once per model and `key`.

    The compiled function holds the model through a weak reference, so the
    per-model table does not keep the model alive.
    """
    per_model = _COMPILED.setdefault(model, {})
    if key in per_model:
        return per_model[key]
    model_ref = weakref.ref(model)
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        function = tf.function(
            lambda source_ids: search(model_ref(), source_ids),
            autograph=False,
            jit_compile=jit_compile,
            # One graph for every batch shape; XLA still specialises per shape.
            input_signature=[tf.TensorSpec((None, None), tf.int32)],
        )
    elif backend == "jax":
        import jax

        def stateless(trainable, non_trainable, source_ids):
            model = model_ref()
            mapping = itertools.chain(
                zip(model.trainable_variables, trainable),
                zip(model.non_trainable_variables, non_trainable),
            )
            with keras.StatelessScope(state_mapping=mapping):
                return search(model, source_ids)

        jitted = jax.jit(stateless)

        def function(source_ids):
            model = model_ref()
            return jitted(
                [v.value for v in model.trainable_variables],
                [v.value for v in model.non_trainable_variables],
                source_ids,
            )

    elif backend == "torch":
        import torch

        def function(source_ids):
            with torch.no_grad():
                return search(model_ref(), source_ids)

    else:
        def function(source_ids):
            return search(model_ref(), source_ids)

    per_model[key] = function
    return function


def run(model, source_ids, key, search, compile, jit_compile):
    """Runs `search(model, source_ids)`: compiled (see `compiled`) unless
    `compile` is False or a graph or trace is being built."""
    if isinstance(source_ids, (list, tuple)):
        source_ids = ops.convert_to_tensor(source_ids, dtype="int32")
    if len(source_ids.shape) != 2:
        raise ValueError(
            f"`source_ids` must be a 2-D (batch, source_length) array of ids, "
            f"got shape {tuple(source_ids.shape)}."
        )
    if not model.built:
        model.build()
    if not compile or in_trace(source_ids):
        return search(model, source_ids)
    source_ids = ops.cast(ops.convert_to_tensor(source_ids), "int32")
    return compiled(model, key, search, jit_compile)(source_ids)
