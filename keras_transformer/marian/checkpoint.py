"""Reading MarianMT checkpoint folders into one neutral structure.

Two layouts are read:

- Hugging Face MarianMT (`config.json`, `generation_config.json`, weights in
  `model.safetensors` or the TensorFlow-era `tf_model.h5`): here;
- an OPUS-MT release (Marian's own `.npz`, its configuration in the
  `special:model.yml` entry, `decoder.yml` for the decoding settings):
  `opus_mt.py`.

Both give a `MarianCheckpoint` (`neutral.py`): a neutral configuration (`MarianConfig`, the
keys below) and the arrays under Transformers' names without the `model.`
prefix, in Transformers' orientation (a projection's `weight` is (out, in)).
The Marian `.npz` has no pad row; like Transformers' own converter, a zero pad
row (and a zero output bias entry) is appended, so both layouts give the same
vocabulary.

Nothing here unpickles: safetensors, HDF5 and `numpy.load(allow_pickle=False)`
only. What our model cannot represent (pre-norm, untied output projections,
unscaled embeddings, ...) is refused with the file and key that say so.
"""

import collections.abc
import json
import re
from pathlib import Path

import numpy as np

from keras_transformer.marian.neutral import (
    ACTIVATIONS,
    CheckpointError,
    MarianCheckpoint,
    MarianConfig,
    complete_embeddings,
    refuse_unless,
)
from keras_transformer.marian.opus_mt import read_opus_mt_folder


def read_checkpoint(folder):
    """The `MarianCheckpoint` of a Hugging Face MarianMT folder (one with a
    `config.json`) or an OPUS-MT release folder (one with a Marian `.npz`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder (a MarianMT or OPUS-MT model folder is expected)")
    if (folder / "config.json").is_file():
        return read_hugging_face_folder(folder)
    if list(folder.glob("*.npz")):
        return read_opus_mt_folder(folder)
    raise CheckpointError(
        f"{folder}: neither a Hugging Face MarianMT folder (no config.json) nor an OPUS-MT release "
        "(no Marian .npz model)"
    )


# ---------------------------------------------------------------- Hugging Face


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as file:
            value = json.load(file)
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _int_key(config, key, path, default=None):
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"{path}: `{key}` must be a non-negative integer, got {value!r}")
    return value


def _hugging_face_config(folder):
    path = folder / "config.json"
    config = _read_json(path)
    model_type = config.get("model_type")
    if model_type != "marian":
        raise CheckpointError(f"{path}: `model_type` is {model_type!r}; only MarianMT models (\"marian\") are read")
    for key, expected, why in (
        ("normalize_before", False, "our Marian import is post-norm only"),
        ("add_final_layer_norm", False, "Marian's post-norm stacks have no final layer norm"),
        ("normalize_embedding", False, "Marian has no layer norm on the embeddings"),
        ("add_bias_logits", False, "the output bias is `final_logits_bias` alone"),
        ("static_position_embeddings", True, "positions must be Marian's sinusoids"),
        ("scale_embedding", True, "Marian scales embeddings by sqrt(d_model)"),
        ("tie_word_embeddings", True, "the output projection must be the target embedding (tied)"),
    ):
        if key in config or key == "scale_embedding":
            value = config.get(key, False)
            refuse_unless(bool(value) == expected, path, key, value, why)
    activation = config.get("activation_function", "gelu")
    refuse_unless(activation in ACTIVATIONS, path, "activation_function", activation,
                   f"the activation must be one of {sorted(ACTIVATIONS)}")
    heads = _int_key(config, "encoder_attention_heads", path)
    refuse_unless(config.get("decoder_attention_heads") == heads, path, "decoder_attention_heads",
                   config.get("decoder_attention_heads"), f"our model has one head count (encoder: {heads})")
    ffn = _int_key(config, "encoder_ffn_dim", path)
    refuse_unless(config.get("decoder_ffn_dim") == ffn, path, "decoder_ffn_dim", config.get("decoder_ffn_dim"),
                   f"our model has one feed-forward width (encoder: {ffn})")
    d_model = _int_key(config, "d_model", path)
    refuse_unless(d_model > 0 and d_model % heads == 0 and d_model % 2 == 0, path, "d_model", d_model,
                   f"it must be even and divisible by the {heads} heads")
    share = bool(config.get("share_encoder_decoder_embeddings", True))
    vocab_size = _int_key(config, "vocab_size", path)
    decoder_vocab_size = config.get("decoder_vocab_size") or vocab_size
    if share and decoder_vocab_size != vocab_size:
        raise CheckpointError(f"{path}: `decoder_vocab_size` ({decoder_vocab_size}) differs from `vocab_size` "
                              f"({vocab_size}) but `share_encoder_decoder_embeddings` is true")
    pad_id = _int_key(config, "pad_token_id", path)
    eos_id = config.get("eos_token_id", 0)
    if isinstance(eos_id, list) and len(eos_id) == 1:
        eos_id = eos_id[0]
    eos_id = _int_key({"eos_token_id": eos_id}, "eos_token_id", path)
    # Marian decodes from pad; a model written by us, from its own BOS.
    decoder_start_id = _int_key(config, "decoder_start_token_id", path, pad_id)
    refuse_unless(decoder_start_id < decoder_vocab_size and decoder_start_id != eos_id, path,
                   "decoder_start_token_id", decoder_start_id, "it must be a target id other than EOS")
    unk_id, source_pad_id = _hugging_face_source_ids(folder, vocab_size)
    if share or source_pad_id is None:
        # Transformers' encoder takes `pad_token_id` as its padding index too.
        source_pad_id = pad_id if pad_id < vocab_size else vocab_size - 1
    if not pad_id < decoder_vocab_size:
        raise CheckpointError(f"{path}: `pad_token_id` {pad_id} is not an id of the {decoder_vocab_size}-token "
                              "target vocabulary")
    rates = {}
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        value = config.get(key, 0.1 if key == "dropout" else 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise CheckpointError(f"{path}: `{key}` must be a rate in [0, 1), got {value!r}")
        rates[key] = float(value)
    return MarianConfig(
        **rates,
        d_model=d_model,
        encoder_layers=_int_key(config, "encoder_layers", path),
        decoder_layers=_int_key(config, "decoder_layers", path),
        num_heads=heads,
        ffn_dim=ffn,
        activation=ACTIVATIONS[activation],
        vocab_size=vocab_size,
        decoder_vocab_size=int(decoder_vocab_size),
        share_embeddings=share,
        eos_id=eos_id,
        unk_id=unk_id,
        pad_id=pad_id,
        source_pad_id=source_pad_id,
        decoder_start_id=decoder_start_id,
        max_position_embeddings=_int_key(config, "max_position_embeddings", path, 512),
    )


def _hugging_face_source_ids(folder, vocab_size):
    """(`<unk>`'s id, `<pad>`'s id or None) in the source `vocab.json` (the
    tokenizer's); Marian's unk 1 without one."""
    path = folder / "vocab.json"
    found = {}
    if path.is_file():
        vocabulary = _read_json(path)
        for piece in ("<unk>", "<pad>"):
            value = vocabulary.get(piece)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab_size:
                found[piece] = value
    return found.get("<unk>", 1), found.get("<pad>")


def _generation_settings(folder, config):
    """Beams, length limit and length penalty from `generation_config.json`,
    or from `config.json` where folders converted before Transformers had
    generation configs keep them."""
    path = folder / "generation_config.json"
    if not path.is_file():
        path = folder / "config.json"
    generation = _read_json(path)
    for key, attribute, kind in (("num_beams", "num_beams", int), ("max_length", "max_length", int),
                                 ("length_penalty", "length_penalty", float)):
        value = generation.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
            raise CheckpointError(f"{path}: `{key}` must be a number, got {value!r}")
        setattr(config, attribute, kind(value))


class _SafetensorsArrays(collections.abc.MutableMapping):
    """The arrays of a safetensors file, under names without `model.`, read
    when asked for and not kept: an import holds one of the file's arrays at
    a time beside the model, not all of them. Names set or deleted here
    shadow the file's."""

    def __init__(self, path):
        try:
            from safetensors import safe_open
        except ImportError as error:
            raise CheckpointError(f"{path}: reading it needs the `safetensors` package (pip install safetensors)") \
                from error
        self._open = lambda: safe_open(str(path), framework="numpy")
        try:
            with self._open() as file:
                names = list(file.keys())
        except Exception as error:  # safetensors raises its own error types
            raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from error
        self._in_file = {name[len("model."):] if name.startswith("model.") else name: name for name in names}
        self._set, self._deleted = {}, set()

    def __contains__(self, name):
        return name in self._set or (name in self._in_file and name not in self._deleted)

    def __getitem__(self, name):
        if name in self._set:
            return self._set[name]
        if name not in self:
            raise KeyError(name)
        with self._open() as file:
            return file.get_tensor(self._in_file[name])

    def __setitem__(self, name, value):
        self._set[name] = value
        self._deleted.discard(name)

    def __delitem__(self, name):
        if name not in self:
            raise KeyError(name)
        self._set.pop(name, None)
        self._deleted.add(name)

    def __iter__(self):
        yield from self._set
        yield from (name for name in self._in_file if name not in self._set and name not in self._deleted)

    def __len__(self):
        return sum(1 for _ in self)


# TF-era layer names (TFMarianMTModel's Keras layers) -> Transformers' names.
_TF_LAYER = re.compile(
    r"(encoder|decoder)/layers\.(\d+)/(self_attn|encoder_attn)?/?(q_proj|k_proj|v_proj|out_proj|fc1|fc2|"
    r"self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)/(kernel|bias|gamma|beta)(?::\d+)?$"
)


def _read_tf_h5(path):
    """Transformers-named arrays from a TF-era `tf_model.h5` (Keras HDF5
    weights of TFMarianMTModel): kernels transposed to (out, in), gamma/beta
    to weight/bias; sinusoid tables are skipped (recomputed)."""
    import h5py

    weights = {}
    try:
        with h5py.File(path, "r") as file:
            datasets = []
            file.visititems(lambda name, item: datasets.append(name) if isinstance(item, h5py.Dataset) else None)
            for name in datasets:
                layer = _TF_LAYER.search(name)
                leaf = name.rsplit("/", 1)[-1].split(":")[0]
                if layer:
                    stack, index, attention, part, kind = layer.groups()
                    prefix = f"{stack}.layers.{index}." + (f"{attention}." if attention else "")
                    target = prefix + part + (".weight" if kind in ("kernel", "gamma") else ".bias")
                    array = np.asarray(file[name])
                    weights[target] = array.T if kind == "kernel" else array
                elif "final_logits_bias" in name:
                    weights["final_logits_bias"] = np.asarray(file[name])
                elif "embed_positions" in name:
                    continue
                elif leaf in ("weight", "embeddings") and "shared" in name:
                    weights["shared.weight"] = np.asarray(file[name])
                elif leaf in ("weight", "embeddings") and "embed_tokens" in name:
                    stack = "decoder" if "decoder" in name else "encoder"
                    weights[f"{stack}.embed_tokens.weight"] = np.asarray(file[name])
                elif "lm_head" in name:
                    weights["lm_head.weight"] = np.asarray(file[name])
    except OSError as error:
        raise CheckpointError(f"{path}: not a readable HDF5 file ({error})") from error
    return weights


def read_hugging_face_folder(folder):
    """The `MarianCheckpoint` of a Transformers MarianMT folder."""
    folder = Path(folder)
    config = _hugging_face_config(folder)
    _generation_settings(folder, config)
    if (folder / "model.safetensors").is_file():
        weights_file = folder / "model.safetensors"
        weights = _SafetensorsArrays(weights_file)
    elif (folder / "tf_model.h5").is_file():
        weights_file = folder / "tf_model.h5"
        weights = {name[len("model."):] if name.startswith("model.") else name: array
                   for name, array in _read_tf_h5(weights_file).items()}
    elif list(folder.glob("model-*.safetensors")):
        raise CheckpointError(f"{folder}: sharded safetensors weights are not read; save the model unsharded")
    else:
        pickled = [name for name in ("pytorch_model.bin", "model.bin", "flax_model.msgpack")
                   if (folder / name).is_file()]
        if pickled:
            raise CheckpointError(
                f"{folder / pickled[0]}: only pickled weights here, and pickles are never loaded (they can run "
                "code). Get a safetensors file: the model's safetensors revision on the Hub, or, where you trust "
                "the file, `MarianMTModel.from_pretrained(folder).save_pretrained(folder, safe_serialization=True)` "
                "with transformers"
            )
        raise CheckpointError(f"{folder}: no weights file (model.safetensors or tf_model.h5)")
    return MarianCheckpoint(config, complete_embeddings(config, weights, weights_file), folder, weights_file)
