"""Lower-precision weights for serving: int8 (Keras 3 quantization) or bfloat16.

`quantize_model(model, mode)` returns a copy of `model`; `model` is unchanged.

- "int8": Keras' `model.quantize("int8")` on every Dense layer (attention
  projections, feed-forward layers: int8 kernels, one abs-max scale per
  output column) and on the shared embedding (`SharedEmbedding.quantize`:
  the tied output projection as an int8 (d_model, vocabulary) kernel, one
  scale per vocabulary row, lookups reading the same rows; an output bias
  stays float32 and is added after the product). Activations are
  quantized per row at run time (abs-max), products are int8 x int8 ->
  int32, then rescaled: the scheme of CTranslate2's int8 compute type.
- "int8_weights": the same int8 weights, no activation quantizer: the int8
  kernel is cast to float and the product runs in float32.
- "bfloat16": the model rebuilt under Keras' "bfloat16" dtype policy,
  weights and compute in bfloat16 (TensorFlow's oneDNN kernels on x86);
  logits are cast to float32 before the search's softmax.

The copy runs in process (`Translator`), exports as a SavedModel
(`export_saved_model(..., quantize=...)` quantizes a copy itself; the op
check confirms the weights and products) and, for int8, to CTranslate2
(`export_ctranslate2` takes the int8 kernels, embedding included, and their
scales as they are: no second quantization).
"""

import contextlib
import gc
import os
import warnings

import keras

from keras_transformer.training.precision import with_dtype_policy

__all__ = ["QUANTIZE_MODES", "check_bfloat16_export", "check_int8_export", "check_quantized_export",
           "int8_dense_layers", "int8_layers", "is_quantized", "quantize_model"]

INT8_MODES = ("int8", "int8_weights")
QUANTIZE_MODES = INT8_MODES + ("bfloat16",)


def check_mode(quantize):
    if quantize is not None and quantize not in QUANTIZE_MODES:
        raise ValueError(f"`quantize` must be None or one of {', '.join(QUANTIZE_MODES)}; got {quantize!r}.")
    return quantize


def _config(mode):
    from keras.quantizers import AbsMaxQuantizer, Int8QuantizationConfig

    weights = AbsMaxQuantizer(axis=0, output_dtype="int8")
    if mode == "int8":
        return Int8QuantizationConfig(weight_quantizer=weights, activation_quantizer=AbsMaxQuantizer(axis=-1))
    return Int8QuantizationConfig(weight_quantizer=weights, activation_quantizer=None)


def quantize_model(model, mode="int8"):
    """A copy of `model` with int8 or bfloat16 weights (see the module docstring); `model` is unchanged."""
    check_mode(mode)
    if mode is None:
        raise ValueError("`mode` must be one of " + ", ".join(QUANTIZE_MODES))
    if is_quantized(model):
        raise ValueError("the model is quantized already (quantize a float model, once).")
    copy = with_dtype_policy(model, "bfloat16" if mode == "bfloat16" else model.dtype_policy.name)
    copy.keras_transformer_quantization = mode
    if mode == "bfloat16":
        return copy
    with warnings.catch_warnings(), _one_garbage_collection():
        # Layers without a quantized form (norms, positions) say so; they stay float.
        warnings.filterwarnings("ignore", message=".*does not have a `quantize` method.*")
        copy.quantize(config=_config(mode))
    if not int8_dense_layers(copy):
        raise RuntimeError("Keras quantized no Dense layer of the model.")
    return copy


@contextlib.contextmanager
def _one_garbage_collection():
    """Keras runs `gc.collect()` for every float kernel a quantized layer drops
    (`Layer.__delattr__`): 1.5 s each for a small model here, minutes for a
    base model in a process holding traced graphs. One collection at the end
    frees the same arrays."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
        gc.collect()


def int8_layers(model):
    """The model's layers holding int8 kernels: Dense layers and shared embeddings (one kernel each)."""
    return [layer for layer in model._flatten_layers(include_self=False)
            if getattr(layer, "quantization_mode", None) == "int8"]


def int8_dense_layers(model):
    """The model's Dense layers holding int8 kernels."""
    return [layer for layer in model._flatten_layers()
            if isinstance(layer, keras.layers.Dense) and getattr(layer, "quantization_mode", None) == "int8"]


def is_quantized(model):
    return (getattr(model, "keras_transformer_quantization", None) is not None
            or any(getattr(layer, "quantization_mode", None) for layer in model._flatten_layers()))


_PRODUCTS = ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "_MklMatMul", "_MklBatchMatMulV2")


def _graph_ops(export_dir):
    """Products by operand dtype name, and casts by source dtype name, in the
    SavedModel's serve graph and its functions (XLA ones included)."""
    from tensorflow.core.framework import types_pb2

    from keras_transformer.export.opcheck import _read_saved_model, _serving_graphs

    products, casts = {}, {}
    for graph in _serving_graphs(export_dir, _read_saved_model(export_dir)):
        nodes = list(graph.node) + [node for function in graph.library.function for node in function.node_def]
        for node in nodes:
            if node.op in _PRODUCTS:
                types = {types_pb2.DataType.Name(node.attr[key].type) for key in ("T", "Ta", "Tb") if key in node.attr}
                name = types.pop() if len(types) == 1 else "mixed"
                products[name] = products.get(name, 0) + 1
            elif node.op == "Cast":
                name = types_pb2.DataType.Name(node.attr["SrcT"].type)
                casts[name] = casts.get(name, 0) + 1
    return products, casts


def _variables(export_dir):
    """{checkpoint key: (tf.DType, shape)} of the SavedModel's variables, each once."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.path.join(export_dir, "variables", "variables"))
    dtypes = reader.get_variable_to_dtype_map()
    shapes = reader.get_variable_to_shape_map()
    # ExportArchive saves each variable under two anonymous keys (`variables/N/...`
    # and `_all_variables/N/...`): count one list.
    for prefix in ("variables/", "_all_variables/", ""):
        keys = [key for key in dtypes if key.startswith(prefix)]
        if keys:
            break
    return {key: (dtypes[key], tuple(shapes[key])) for key in keys}


def check_int8_export(export_dir, mode="int8", expected_kernels=None, float_matrices=()):
    """Checks that a SavedModel decodes with 8-bit weights.

    - its variables hold int8 kernels (`expected_kernels` of them when
      given: Dense layers and the shared embedding), and no float matrix is
      left but those of shapes in `float_matrices` (learned positions);
    - its graph multiplies int8 by int8 (mode "int8": activations quantized
      at run time), or casts int8 kernels to float and has no int8 product
      (mode "int8_weights").

    Returns {"int8_kernels": n, "int8_products": n, "int8_casts": n}.
    Raises ValueError naming what is missing.
    """
    export_dir = os.fspath(export_dir)
    if mode not in INT8_MODES:
        raise ValueError(f"`mode` must be one of {', '.join(INT8_MODES)}; got {mode!r}.")
    variables = _variables(export_dir)
    int8 = [key for key, (dtype, _) in variables.items() if dtype.name == "int8"]
    allowed = {tuple(shape) for shape in float_matrices}
    float_kernels = [shape for dtype, shape in variables.values()
                     if dtype.is_floating and len(shape) == 2 and shape not in allowed]
    if not int8:
        raise ValueError(f"{export_dir}: no int8 variable: the export's weights are not quantized")
    if expected_kernels is not None and len(int8) != expected_kernels:
        raise ValueError(f"{export_dir}: {len(int8)} int8 kernels, expected {expected_kernels}")
    if float_kernels:
        raise ValueError(f"{export_dir}: float matrices left beside the int8 kernels: {sorted(set(float_kernels))}")
    products, casts = _graph_ops(export_dir)
    products, casts = products.get("DT_INT8", 0), casts.get("DT_INT8", 0)
    if mode == "int8" and not products:
        raise ValueError(f"{export_dir}: no int8 x int8 product in the graph (mode 'int8')")
    if mode == "int8_weights" and (products or not casts):
        raise ValueError(f"{export_dir}: mode 'int8_weights' needs int8 kernels cast to float and no int8 "
                         f"product; the graph has {casts} casts and {products} int8 products")
    return {"int8_kernels": len(int8), "int8_products": products, "int8_casts": casts}


def check_bfloat16_export(export_dir):
    """Checks that a SavedModel decodes with bfloat16 weights and products:
    every float variable is bfloat16, and every matrix product of the graph
    multiplies bfloat16 operands (none is left in float32).

    Returns {"bfloat16_variables": n, "bfloat16_products": n}; raises ValueError naming what is left.
    """
    export_dir = os.fspath(export_dir)
    variables = _variables(export_dir)
    wide = sorted({f"{dtype.name} {shape}" for dtype, shape in variables.values()
                   if dtype.is_floating and dtype.name != "bfloat16"})
    if wide:
        raise ValueError(f"{export_dir}: float variables not in bfloat16: {wide}")
    products, _ = _graph_ops(export_dir)
    others = {name: count for name, count in products.items() if name != "DT_BFLOAT16"}
    if others:
        raise ValueError(f"{export_dir}: matrix products outside bfloat16: {others}")
    if not products.get("DT_BFLOAT16"):
        raise ValueError(f"{export_dir}: no bfloat16 product in the graph")
    return {"bfloat16_variables": len(variables), "bfloat16_products": products["DT_BFLOAT16"]}


def check_quantized_export(export_dir, model):
    """The check of `model`'s quantization mode for its SavedModel (nothing for a float model)."""
    mode = getattr(model, "keras_transformer_quantization", None)
    if mode is None:
        return None
    if mode == "bfloat16":
        return check_bfloat16_export(export_dir)
    positions = getattr(model.position_encoding, "position_embeddings", None)
    return check_int8_export(export_dir, mode, len(int8_layers(model)),
                             float_matrices=[tuple(positions.shape)] if positions is not None else ())
