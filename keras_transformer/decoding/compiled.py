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

from keras_transformer._tensorflow import tensorflow
from keras_transformer.decoding import phases

# model -> {options: compiled function}; weak so that models can be freed.
_COMPILED = weakref.WeakKeyDictionary()


def in_trace(source_ids):
    """True while a TF graph or a JAX trace is being built."""
    tf = tensorflow()
    if tf is not None:
        return tf.inside_function()
    if keras.backend.backend() == "jax":
        import jax

        return isinstance(source_ids, jax.core.Tracer)
    return False


def compiled(model, key, search, jit_compile, dtypes=("int32",)):
    """`search(model, *inputs) -> dict`, compiled once per model and `key`;
    the inputs are 2-D tensors of `dtypes` (source ids first).

    The compiled function holds the model through a weak reference, so the
    per-model table does not keep the model alive.
    """
    per_model = _COMPILED.setdefault(model, {})
    if key in per_model:
        return per_model[key]
    model_ref = weakref.ref(model)
    backend = keras.backend.backend()
    tf = tensorflow()
    if tf is not None:
        function = tf.function(
            lambda *inputs: search(model_ref(), *inputs),
            autograph=False,
            jit_compile=jit_compile,
            # One graph for every batch shape; XLA still specialises per shape.
            input_signature=[tf.TensorSpec((None, None), dtype) for dtype in dtypes],
        )
    elif backend == "jax":
        import jax

        def stateless(trainable, non_trainable, *inputs):
            model = model_ref()
            mapping = itertools.chain(
                zip(model.trainable_variables, trainable),
                zip(model.non_trainable_variables, non_trainable),
            )
            with keras.StatelessScope(state_mapping=mapping):
                return search(model, *inputs)

        jitted = jax.jit(stateless)

        def function(*inputs):
            model = model_ref()
            return jitted(
                [v.value for v in model.trainable_variables],
                [v.value for v in model.non_trainable_variables],
                *inputs,
            )

    elif backend == "torch":
        import torch

        def function(*inputs):
            with torch.no_grad():
                return search(model_ref(), *inputs)

    else:
        def function(*inputs):
            return search(model_ref(), *inputs)

    per_model[key] = function
    return function


def as_ids(name, ids):
    """A 2-D int array (list, numpy or tensor) as a tensor, or an error naming it."""
    if isinstance(ids, (list, tuple)):
        ids = ops.convert_to_tensor(ids, dtype="int32")
    if len(ids.shape) != 2:
        raise ValueError(f"`{name}` must be a 2-D (batch, length) array of ids, got shape {tuple(ids.shape)}.")
    return ids


def run(model, source_ids, key, search, compile, jit_compile, extra_inputs=(), phased=False):
    """Runs `search(model, source_ids, *extra_inputs)`: compiled (see
    `compiled`) unless `compile` is False or a graph or trace is being built.

    A `phased` search (one that decodes in `phases`) compiled as a TensorFlow
    graph is traced once per width class of its batches
    (`phases.width_class`): the graph's width stays dynamic, but a trace for
    short sources holds only the phases they can reach (a tiny model's
    translation of one sentence traced 5 phases, 6-7 CPU-s, where 2 do).
    JAX and PyTorch know the width anyway; an export, tracing for any width,
    gets every phase."""
    source_ids = as_ids("source_ids", source_ids)
    if not model.built:
        model.build()
    inputs = (source_ids,) + tuple(extra_inputs)
    if not compile or in_trace(source_ids):
        return search(model, *inputs)
    dtypes = ("int32",) + tuple(
        "float32" if "float" in str(getattr(x, "dtype", "int32")) else "int32" for x in extra_inputs
    )
    inputs = tuple(ops.cast(ops.convert_to_tensor(x), dtype) for x, dtype in zip(inputs, dtypes))
    bound = phases.width_class(source_ids.shape[1]) if phased and tensorflow() is not None else None
    key += (("source width at most", bound), ("static row buckets", phases.static_row_bucket_count()),
            ("finer phases", phases.finer_phases_set()))
    function = compiled(model, key, search, jit_compile, dtypes)
    with phases.source_width_at_most(bound):
        return function(*inputs)
