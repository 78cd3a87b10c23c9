"""The checksums of a preset folder: written by `save_to_preset`, checked on loading.

KerasHub reads a preset's files one by one (config.json, task.json,
tokenizer.json, the weights, the tokenizer assets) and a missing or changed
file surfaces, if at all, as an error about something else (a weights file of
other shapes, a sharded-weights index that was never written). The folder's
`keras_transformer_manifest.json` lists the SHA-256 of every file it had when
it was saved; loading checks them first and names the file that is missing or
altered.
"""

import json
import os

from keras_transformer.data.shards import file_sha256

MANIFEST_FILE = "keras_transformer_manifest.json"


class PresetError(ValueError):
    """A preset folder that is not as it was saved."""




def _files(folder):
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            relative = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            if relative != MANIFEST_FILE:
                found.append(relative)
    return sorted(found)


def write(folder):
    """Lists the SHA-256 of every file under `folder` in its manifest."""
    files = {name: file_sha256(os.path.join(folder, name)) for name in _files(folder)}
    with open(os.path.join(folder, MANIFEST_FILE), "w", encoding="utf-8") as stream:
        json.dump({"format": 1, "sha256": files}, stream, indent=2, sort_keys=True)


def check(preset):
    """Raises `PresetError` naming the first file of the manifest of
    `preset` (a folder, or a KerasHub URI) that is missing or differs. A
    preset without a manifest (not written by this package) passes."""
    from keras_hub.src.utils.preset_utils import check_file_exists, get_file

    if not check_file_exists(preset, MANIFEST_FILE):
        return
    path = get_file(preset, MANIFEST_FILE)
    try:
        with open(path, encoding="utf-8") as stream:
            expected = json.load(stream)["sha256"]
    except (ValueError, KeyError, TypeError) as error:
        raise PresetError(f"KerasHub preset {preset}: {MANIFEST_FILE} is not a valid manifest ({error}).") from None
    for name, digest in sorted(expected.items()):
        if not check_file_exists(preset, name):
            raise PresetError(f"KerasHub preset {preset}: {name} is missing (listed in {MANIFEST_FILE}).")
        if file_sha256(get_file(preset, name)) != digest:
            raise PresetError(f"KerasHub preset {preset}: {name} was altered since the preset was saved "
                              f"(its SHA-256 differs from {MANIFEST_FILE}).")


def check_folder_of(weights_path):
    """`check` of the folder holding `weights_path`, when that folder has a manifest."""
    folder = os.path.dirname(os.path.abspath(os.fspath(weights_path)))
    if os.path.isfile(os.path.join(folder, MANIFEST_FILE)):
        check(folder)
