"""Where TensorFlow meets the backend-agnostic package: the one rule, and its two helpers.

The rule:

- A backend-agnostic module (layers, models, decoding, training, run, ...)
  never imports TensorFlow at import time. Where it has a TensorFlow-only
  path it asks `tensorflow()`, which gives the module on the TensorFlow
  backend and None on the others, so `import keras_transformer` works under
  JAX and torch on a machine without TensorFlow.
- A TensorFlow-only module (`data.tokenizer`, `data.pipeline`,
  `export.saved_model`, `training.distribute`) imports TensorFlow at its
  top, like any other dependency. It is reached only through the
  `lazy_exports` of its package (`keras_transformer.data`,
  `keras_transformer.export`), which import it on first use of one of its
  names, or by importing it by name (`keras_transformer.training.distribute`,
  which says so in its docstring and refuses other backends).

What runs before Keras is imported (the console script's backend default,
a quiet TensorFlow import) lives in `keras_transformer._startup`.
"""

import importlib

import keras


def tensorflow():
    """The `tensorflow` module on the TensorFlow backend; None on the others.

    Imported only here and only on the TensorFlow backend, where Keras has
    already imported it.
    """
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    return tf


def lazy_exports(package, exports):
    """`(__all__, __getattr__, __dir__)` for a package's `__init__`: a submodule
    is imported on first use of one of its names.

    `exports` maps a submodule name to the public names it defines. A package
    that holds TensorFlow-only modules beside backend-agnostic ones (the
    corpus readers of `keras_transformer.data`) uses it, so that importing
    the package or its TensorFlow-free names does not import TensorFlow.
    """
    module_of = {name: module for module, names in exports.items() for name in names}
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name):
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(module_of))

    return sorted(module_of), __getattr__, __dir__
