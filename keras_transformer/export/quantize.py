"""8-bit weights for serving: Keras 3 int8 quantization of a Transformer's copy.

`quantize_model(model, "int8")` returns a copy of `model` whose Dense layers
(attention projections, feed-forward layers: all but the shared embedding)
hold int8 kernels with one float32 scale per output column (Keras'
`model.quantize("int8")`: abs-max per output channel). Two modes:

- "int8": Keras' default, activations quantized per row at run time
  (abs-max, int8 x int8 -> int32 products, then rescaled): the scheme of
  CTranslate2's int8 compute type;
- "int8_weights": weight-only int8 (no activation quantizer): the int8
  kernel is cast to float and the product runs in float32.

The shared embedding (input embedding and pre-softmax projection) stays
float32 in both. The copy runs in process (`Translator`), exports as a
SavedModel (`export_saved_model(..., quantize=...)` quantizes a copy
itself) and to CTranslate2 (`export_ctranslate2` takes its int8 kernels and
scales as they are, no second quantization).
"""

import os
import warnings

import keras

__all__ = ["QUANTIZE_MODES", "check_int8_export", "int8_dense_layers", "is_quantized", "quantize_model"]

QUANTIZE_MODES = ("int8", "int8_weights")


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
    """A copy of `model` with int8 Dense kernels (see the module docstring); `model` is unchanged."""
    check_mode(mode)
    if mode is None:
        raise ValueError("`mode` must be one of " + ", ".join(QUANTIZE_MODES))
    if is_quantized(model):
        raise ValueError("the model is quantized already (quantize a float model, once).")
    if not model.built:
        model.build()
    copy = type(model).from_config(model.get_config())
    copy.build()
    copy.set_weights(model.get_weights())
    with warnings.catch_warnings():
        # Layers without a quantized form (embeddings, norms) say so; they stay float.
        warnings.filterwarnings("ignore", message=".*does not have a `quantize` method.*")
        copy.quantize(config=_config(mode))
    copy.keras_transformer_quantization = mode
    if not int8_dense_layers(copy):
        raise RuntimeError("Keras quantized no Dense layer of the model.")
    return copy


def int8_dense_layers(model):
    """The model's Dense layers holding int8 kernels."""
    return [layer for layer in model._flatten_layers()
            if isinstance(layer, keras.layers.Dense) and getattr(layer, "quantization_mode", None) == "int8"]


def is_quantized(model):
    return any(getattr(layer, "quantization_mode", None) for layer in model._flatten_layers())


def _int8_graph_ops(export_dir):
    """(int8 x int8 products, casts from int8) in the SavedModel's serve graph and functions."""
    from tensorflow.core.framework import types_pb2

    from keras_transformer.export.opcheck import _read_saved_model, _serving_graphs

    products = casts = 0
    for graph in _serving_graphs(export_dir, _read_saved_model(export_dir)):
        nodes = list(graph.node) + [node for function in graph.library.function for node in function.node_def]
        for node in nodes:
            if node.op in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
                types = [node.attr[key].type for key in ("T", "Ta", "Tb") if key in node.attr]
                if types and all(t == types_pb2.DT_INT8 for t in types):
                    products += 1
            elif node.op == "Cast" and node.attr["SrcT"].type == types_pb2.DT_INT8:
                casts += 1
    return products, casts


def check_int8_export(export_dir, mode="int8", expected_kernels=None):
    """Checks that a SavedModel decodes with 8-bit weights.

    - its variables hold int8 kernels (`expected_kernels` of them when
      given), and no float matrix is left but the embedding table(s);
    - its graph multiplies int8 by int8 (mode "int8": activations quantized
      at run time), or casts int8 kernels to float and has no int8 product
      (mode "int8_weights").

    Returns {"int8_kernels": n, "int8_products": n, "int8_casts": n}.
    Raises ValueError naming what is missing.
    """
    import tensorflow as tf

    export_dir = os.fspath(export_dir)
    check_mode(mode)
    reader = tf.train.load_checkpoint(os.path.join(export_dir, "variables", "variables"))
    dtypes = reader.get_variable_to_dtype_map()
    shapes = reader.get_variable_to_shape_map()
    # ExportArchive saves each variable under two anonymous keys (`variables/N/...`
    # and `_all_variables/N/...`): count one list.
    for prefix in ("variables/", "_all_variables/", ""):
        keys = [key for key in dtypes if key.startswith(prefix)]
        if keys:
            break
    dtypes = {key: dtypes[key] for key in keys}
    int8 = [key for key, dtype in dtypes.items() if dtype == tf.int8]
    matrices = [tuple(shapes[key]) for key, dtype in dtypes.items() if dtype.is_floating and len(shapes[key]) == 2]
    widest = max((shape[0] for shape in matrices), default=0)
    float_kernels = [shape for shape in matrices if shape[0] != widest]
    if not int8:
        raise ValueError(f"{export_dir}: no int8 variable: the export's weights are not quantized")
    if expected_kernels is not None and len(int8) != expected_kernels:
        raise ValueError(f"{export_dir}: {len(int8)} int8 kernels, expected {expected_kernels}")
    if float_kernels:
        raise ValueError(f"{export_dir}: float matrices besides the embeddings: {sorted(set(float_kernels))}")
    products, casts = _int8_graph_ops(export_dir)
    if mode == "int8" and not products:
        raise ValueError(f"{export_dir}: no int8 x int8 product in the graph (mode 'int8')")
    if mode == "int8_weights" and (products or not casts):
        raise ValueError(f"{export_dir}: mode 'int8_weights' needs int8 kernels cast to float and no int8 "
                         f"product; the graph has {casts} casts and {products} int8 products")
    return {"int8_kernels": len(int8), "int8_products": products, "int8_casts": casts}
