"""Putting a folder written aside into place: the one home of that step for every writer of a
whole folder (run import, the CTranslate2, KerasHub and MarianMT exports)."""

import os
import shutil
import tempfile
from pathlib import Path


def replace_folder(new, target):
    """Renames the folder `new` to `target`; an existing `target` goes only once the new one is in
    place (a failed rename puts it back), so no moment leaves neither."""
    new, target = Path(new), Path(target)
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=".old-", dir=new.parent))
        os.rename(target, old / "folder")
    try:
        os.rename(new, target)
    except BaseException:
        if old is not None:
            os.rename(old / "folder", target)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
