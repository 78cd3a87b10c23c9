"""Registers `keras_transformer.hub` with KerasHub whenever KerasHub is imported.

KerasHub finds the task, preprocessor and tokenizer classes of a preset among
the classes registered with Keras (`keras_hub.models.Seq2SeqLM.from_preset`
looks for a subclass whose `backbone_cls` is the preset's), so they must be
defined before a preset of ours loads. Importing KerasHub costs ~1.5 s, and
the package must import without it (it is the optional `[hub]` extra), so
`import keras_transformer` does not import it: it defines the classes now if
KerasHub is imported already, and otherwise right after KerasHub's own import
finishes, whichever comes first.
"""

import importlib.abc
import importlib.util
import sys

_MODULE = "keras_hub"


def _register():
    import keras_transformer.hub  # noqa: F401  (defines and registers the classes)


class _RegisteringLoader(importlib.abc.Loader):
    """KerasHub's own loader, then the registration."""

    def __init__(self, loader, finder):
        self.loader = loader
        self.finder = finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        _register()

    def __getattr__(self, name):  # resource readers and the like
        return getattr(self.loader, name)


class _AfterKerasHubImport(importlib.abc.MetaPathFinder):
    """KerasHub's spec as the other finders find it, with a loader that registers after loading."""

    def __init__(self):
        self.finding = False

    def find_spec(self, name, path=None, target=None):
        if name != _MODULE or self.finding:
            return None
        self.finding = True  # the other finders' spec: this one steps aside meanwhile
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.finding = False
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader, self)
        return spec


def install():
    """Called by `keras_transformer/__init__.py`."""
    if _MODULE in sys.modules:
        if sys.modules[_MODULE] is not None:  # None: a program that blocks the import
            _register()
    elif not any(isinstance(finder, _AfterKerasHubImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterKerasHubImport())
