"""Lazily loaded package names: a submodule is imported on first use of one of its names."""

import importlib


def lazy_exports(package, exports):
    """`(__all__, __getattr__, __dir__)` for a package's `__init__`.

    `exports` maps a submodule name to the public names it defines.
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
