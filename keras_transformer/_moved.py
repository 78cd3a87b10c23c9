"""The deprecation of a module path that moved (top-level modules, now in `keras_transformer.run`, `.cli`,
`.data` and `.decoding`)."""

import warnings


def warn_moved(old, new):
    """Warns, from the old module's body, that importing `old` is deprecated for `new`.

    stacklevel 3 names the line that imported the old path: past this
    function and the old module (the import machinery's frames are skipped)."""
    warnings.warn(f"{old} is deprecated: it moved to {new}; import from there (the old path goes in the next "
                  "release).", DeprecationWarning, stacklevel=3)
