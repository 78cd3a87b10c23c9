"""Optional packages that some test modules need (CTranslate2, torch, KerasHub).

`required(name)` imports `name`. Outside CI a missing package skips the
module (a developer may not have installed the test extra); under CI
(`CI=true`, as .ci/run runs) it raises, so the run fails instead of
passing with a whole module skipped: the test extra installs every one.
"""

import importlib
import os

import pytest


def in_ci():
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def required(name):
    if in_ci():
        try:
            return importlib.import_module(name)
        except ImportError as error:
            raise ImportError(f"CI=true and {name!r} does not import ({error}); the test extra installs it, "
                              "so this run fails rather than skip the module") from error
    return pytest.importorskip(name)
