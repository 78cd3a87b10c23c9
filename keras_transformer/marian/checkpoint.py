"""Reading MarianMT checkpoint folders into one neutral structure.

Two layouts are read:

- Hugging Face MarianMT (`config.json`, `generation_config.json`, weights in
  `model.safetensors` or the TensorFlow-era `tf_model.h5`);
- an OPUS-MT release (Marian's own `.npz`, its configuration in the
  `special:model.yml` entry, `decoder.yml` for the decoding settings).

Both give a `MarianCheckpoint`: a neutral configuration (`MarianConfig`, the
keys below) and the arrays under Transformers' names without the `model.`
prefix, in Transformers' orientation (a projection's `weight` is (out, in)).
The Marian `.npz` has no pad row; like Transformers' own converter, a zero pad
row (and a zero output bias entry) is appended, so both layouts give the same
vocabulary.

Nothing here unpickles: safetensors, HDF5 and `numpy.load(allow_pickle=False)`
only. What our model cannot represent (pre-norm, untied output projections,
unscaled embeddings, ...) is refused with the file and key that say so.
"""

import dataclasses
import json
import re
from pathlib import Path

import numpy as np

ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}

_LAYER_PARTS = (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj", "self_attn_layer_norm",
    "fc1", "fc2", "final_layer_norm",
)
_DECODER_EXTRA_PARTS = (
    "encoder_attn.q_proj", "encoder_attn.k_proj", "encoder_attn.v_proj", "encoder_attn.out_proj",
    "encoder_attn_layer_norm",
)


class CheckpointError(ValueError):
    """A checkpoint folder we cannot read or cannot represent; the message
    names the file (and key) at fault."""


@dataclasses.dataclass
class MarianConfig:
    """What our model needs from a Marian checkpoint, whatever its layout.

    `vocab_size` is the source (or shared) vocabulary and
    `decoder_vocab_size` the target one, both with the pad row. Generation
    settings (`num_beams`, `max_length`, `length_penalty`) are None where the
    folder gives none.
    """

    d_model: int
    encoder_layers: int
    decoder_layers: int
    num_heads: int
    ffn_dim: int
    activation: str  # a Keras activation name: silu, gelu or relu
    vocab_size: int
    decoder_vocab_size: int
    share_embeddings: bool
    eos_id: int
    unk_id: int
    pad_id: int  # the target vocabulary's
    source_pad_id: int
    decoder_start_id: int  # pad (Marian's), or a BOS of its own (a model we wrote)
    max_position_embeddings: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    num_beams: int | None = None
    max_length: int | None = None
    length_penalty: float | None = None


@dataclasses.dataclass
class MarianCheckpoint:
    """A neutral checkpoint: `config`, `weights` (Transformers' names without
    `model.`, (out, in) projections; `encoder.embed_tokens.weight` and
    `decoder.embed_tokens.weight` are the same array when shared;
    `final_logits_bias` is 1-D), the folder and the weights file read."""

    config: MarianConfig
    weights: dict
    folder: Path
    weights_file: Path


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


def _refuse_unless(condition, path, key, value, why):
    if not condition:
        raise CheckpointError(f"{path}: `{key}: {json.dumps(value)}` is not supported: {why}")


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
            _refuse_unless(bool(value) == expected, path, key, value, why)
    activation = config.get("activation_function", "gelu")
    _refuse_unless(activation in ACTIVATIONS, path, "activation_function", activation,
                   f"the activation must be one of {sorted(ACTIVATIONS)}")
    heads = _int_key(config, "encoder_attention_heads", path)
    _refuse_unless(config.get("decoder_attention_heads") == heads, path, "decoder_attention_heads",
                   config.get("decoder_attention_heads"), f"our model has one head count (encoder: {heads})")
    ffn = _int_key(config, "encoder_ffn_dim", path)
    _refuse_unless(config.get("decoder_ffn_dim") == ffn, path, "decoder_ffn_dim", config.get("decoder_ffn_dim"),
                   f"our model has one feed-forward width (encoder: {ffn})")
    d_model = _int_key(config, "d_model", path)
    _refuse_unless(d_model > 0 and d_model % heads == 0 and d_model % 2 == 0, path, "d_model", d_model,
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
    _refuse_unless(decoder_start_id < decoder_vocab_size and decoder_start_id != eos_id, path,
                   "decoder_start_token_id", decoder_start_id, "it must be a target id other than EOS")
    unk_id = _hugging_face_unk_id(folder)
    # Transformers pads the source through its attention mask, not by id; with
    # separate vocabularies Marian's pad is the source vocabulary's last id.
    source_pad_id = pad_id if share else vocab_size - 1
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


def _hugging_face_unk_id(folder):
    """`<unk>`'s id in `vocab.json` (the tokenizer's); 1, Marian's, without one."""
    path = folder / "vocab.json"
    if path.is_file():
        unk = _read_json(path).get("<unk>")
        if isinstance(unk, int) and not isinstance(unk, bool):
            return unk
    return 1


def _generation_settings(folder, config):
    path = folder / "generation_config.json"
    if not path.is_file():
        return
    generation = _read_json(path)
    for key, attribute, kind in (("num_beams", "num_beams", int), ("max_length", "max_length", int),
                                 ("length_penalty", "length_penalty", float)):
        value = generation.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
            raise CheckpointError(f"{path}: `{key}` must be a number, got {value!r}")
        setattr(config, attribute, kind(value))


def _read_safetensors(path):
    try:
        from safetensors.numpy import load_file
    except ImportError as error:
        raise CheckpointError(f"{path}: reading it needs the `safetensors` package (pip install safetensors)") \
            from error
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own error types
        raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from error


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
        raw = _read_safetensors(weights_file)
    elif (folder / "tf_model.h5").is_file():
        weights_file = folder / "tf_model.h5"
        raw = _read_tf_h5(weights_file)
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
    weights = {}
    for name, array in raw.items():
        name = name[len("model."):] if name.startswith("model.") else name
        weights[name] = np.asarray(array)
    return MarianCheckpoint(config, _complete_embeddings(config, weights, weights_file), folder, weights_file)


def _complete_embeddings(config, weights, path, size_keys=("vocab_size", "decoder_vocab_size")):
    """Checks the embedding and bias shapes and sets both embed_tokens names
    (the same array when shared); refuses an output projection that is not
    the target embedding."""
    shared = weights.pop("shared.weight", None)
    encoder = weights.get("encoder.embed_tokens.weight")
    decoder = weights.get("decoder.embed_tokens.weight")
    if config.share_embeddings:
        embedding = next((array for array in (shared, encoder, decoder) if array is not None), None)
        if embedding is None:
            raise CheckpointError(f"{path}: no token embedding (`model.shared.weight`)")
        encoder = decoder = embedding
    else:
        encoder = encoder if encoder is not None else shared
        if encoder is None or decoder is None:
            missing = "model.encoder.embed_tokens.weight" if encoder is None else "model.decoder.embed_tokens.weight"
            raise CheckpointError(f"{path}: separate vocabularies but no `{missing}`")
    for name, array, rows, key in (("encoder", encoder, config.vocab_size, size_keys[0]),
                                   ("decoder", decoder, config.decoder_vocab_size, size_keys[1])):
        if array.shape != (rows, config.d_model):
            raise CheckpointError(
                f"{path}: the {name} embedding has shape {tuple(array.shape)} but the configuration says "
                f"{rows} tokens of width {config.d_model} (`{key}`, `d_model`)"
            )
    weights["encoder.embed_tokens.weight"] = encoder
    weights["decoder.embed_tokens.weight"] = decoder
    head = weights.pop("lm_head.weight", None)
    if head is not None and not np.array_equal(head, decoder):
        raise CheckpointError(f"{path}: `lm_head.weight` differs from the target embedding (an untied output "
                              "projection, which our model does not have)")
    bias = weights.get("final_logits_bias")
    bias = np.zeros((config.decoder_vocab_size,), np.float32) if bias is None else np.asarray(bias).reshape(-1)
    if bias.shape != (config.decoder_vocab_size,):
        raise CheckpointError(f"{path}: `final_logits_bias` has {bias.shape[0]} entries, the target vocabulary "
                              f"{config.decoder_vocab_size}")
    weights["final_logits_bias"] = bias
    _check_layers(config, weights, path)
    return weights


def _check_layers(config, weights, path):
    for stack, depth, parts in (("encoder", config.encoder_layers, _LAYER_PARTS),
                                ("decoder", config.decoder_layers, _LAYER_PARTS + _DECODER_EXTRA_PARTS)):
        for index in range(depth):
            for part in parts:
                for kind in ("weight", "bias"):
                    name = f"{stack}.layers.{index}.{part}.{kind}"
                    if name not in weights:
                        raise CheckpointError(f"{path}: `{name}` is missing ({depth} {stack} layers configured)")
        extra = f"{stack}.layers.{depth}.self_attn.q_proj.weight"
        if extra in weights:
            raise CheckpointError(f"{path}: more {stack} layers than the {depth} configured (`{extra}`)")


# ---------------------------------------------------------------- OPUS-MT (Marian .npz)

# Marian's per-layer names -> Transformers' (the matrices are (in, out) in Marian).
_NPZ_ATTENTION = {"Wq": "q_proj.weight", "bq": "q_proj.bias", "Wk": "k_proj.weight", "bk": "k_proj.bias",
                  "Wv": "v_proj.weight", "bv": "v_proj.bias", "Wo": "out_proj.weight", "bo": "out_proj.bias"}


def _yaml(text, path):
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CheckpointError(f"{path}: not valid YAML ({error})") from error
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a YAML mapping")
    return value


def _opus_mt_npz(folder):
    decoder_yml = folder / "decoder.yml"
    decoder = _yaml(decoder_yml.read_text(encoding="utf-8"), decoder_yml) if decoder_yml.is_file() else {}
    models = decoder.get("models")
    if models:
        if not isinstance(models, list) or len(models) != 1:
            raise CheckpointError(f"{decoder_yml}: `models` must name one model (ensembles are not imported), "
                                  f"got {models!r}")
        path = folder / str(models[0])
        if not path.is_file():
            raise CheckpointError(f"{decoder_yml}: `models` names {models[0]}, which is not in {folder}")
        return path, decoder
    candidates = sorted(folder.glob("*.npz"))
    if len(candidates) != 1:
        raise CheckpointError(f"{folder}: {len(candidates)} .npz files and no decoder.yml to say which is the model")
    return candidates[0], decoder


def read_opus_mt_folder(folder):
    """The `MarianCheckpoint` of an OPUS-MT release folder (Marian `.npz`)."""
    folder = Path(folder)
    path, decoder = _opus_mt_npz(folder)
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: not a readable .npz file ({error})") from error
    with npz:
        if "special:model.yml" not in npz.files:
            raise CheckpointError(f"{path}: no `special:model.yml` entry (Marian's model configuration)")
        options = _yaml(bytes(npz["special:model.yml"].astype(np.uint8)).decode("utf-8").rstrip("\x00"),
                        f"{path} (special:model.yml)")
        config = _opus_mt_config(options, path)
        weights = _opus_mt_weights(npz, config, path)
    for key, attribute, kind in (("beam-size", "num_beams", int), ("normalize", "length_penalty", float),
                                 ("max-length", "max_length", int)):
        if isinstance(decoder.get(key), (int, float)) and not isinstance(decoder.get(key), bool):
            setattr(config, attribute, kind(decoder[key]))
    # Sizes count the appended pad row; the message names Marian's key.
    weights = _complete_embeddings(config, weights, path, ("dim-vocabs + 1", "dim-vocabs + 1"))
    return MarianCheckpoint(config, weights, folder, path)


def _opus_mt_config(options, path):
    where = f"{path} (special:model.yml)"

    def option(key, default=None):
        return options.get(key, default)

    model_type = option("type", "transformer")
    _refuse_unless(model_type == "transformer", where, "type", model_type, "only Marian transformers are read")
    preprocess = option("transformer-preprocess", "") or ""
    _refuse_unless(preprocess in ("", "d"), where, "transformer-preprocess", preprocess,
                   "our Marian import is post-norm only (no `n` before a sub-layer)")
    postprocess = option("transformer-postprocess", "dan")
    _refuse_unless(postprocess == "dan", where, "transformer-postprocess", postprocess,
                   "sub-layers must end with dropout, add, norm (`dan`)")
    post_emb = option("transformer-postprocess-emb", "d") or ""
    _refuse_unless(post_emb in ("", "d"), where, "transformer-postprocess-emb", post_emb,
                   "no layer norm on the embeddings")
    autoregression = option("transformer-decoder-autoreg", "self-attention")
    _refuse_unless(autoregression == "self-attention", where, "transformer-decoder-autoreg", autoregression,
                   "the decoder must use self-attention")
    for key in ("transformer-ffn-depth", "transformer-decoder-ffn-depth"):
        depth = option(key, 2) or 2
        _refuse_unless(depth == 2, where, key, depth, "feed-forward networks have two layers")
    _refuse_unless(not option("transformer-tied-layers"), where, "transformer-tied-layers",
                   option("transformer-tied-layers"), "layers must have their own weights")
    _refuse_unless(not option("transformer-train-position-embeddings", False), where,
                   "transformer-train-position-embeddings", option("transformer-train-position-embeddings"),
                   "positions must be Marian's sinusoids")
    activation = option("transformer-ffn-activation", "swish")
    _refuse_unless(activation in ACTIVATIONS, where, "transformer-ffn-activation", activation,
                   f"the activation must be one of {sorted(ACTIVATIONS)}")
    dim_emb = option("dim-emb")
    heads = option("transformer-heads", 8)
    ffn = option("transformer-dim-ffn", 2048)
    decoder_ffn = option("transformer-decoder-dim-ffn", ffn) or ffn
    _refuse_unless(decoder_ffn == ffn, where, "transformer-decoder-dim-ffn", decoder_ffn,
                   f"our model has one feed-forward width ({ffn})")
    vocabs = option("dim-vocabs")
    if not isinstance(dim_emb, int) or not isinstance(vocabs, list) or len(vocabs) != 2:
        raise CheckpointError(f"{where}: `dim-emb` and a two-entry `dim-vocabs` are required")
    tied_all = bool(option("tied-embeddings-all", False))
    _refuse_unless(tied_all or option("tied-embeddings", False), where, "tied-embeddings", option("tied-embeddings"),
                   "the output projection must be the target embedding (tied)")
    # Marian's vocabularies have no pad; as Transformers' converter does, one
    # zero row is appended for it (and Marian decodes from a zero vector).
    vocab_size, decoder_vocab_size = vocabs[0] + 1, vocabs[1] + 1
    if tied_all and vocabs[0] != vocabs[1]:
        raise CheckpointError(f"{where}: `tied-embeddings-all` with two vocabulary sizes {vocabs}")
    return MarianConfig(
        d_model=dim_emb, encoder_layers=option("enc-depth", 6), decoder_layers=option("dec-depth", 6),
        num_heads=heads, ffn_dim=ffn, activation=ACTIVATIONS[activation], vocab_size=vocab_size,
        decoder_vocab_size=decoder_vocab_size, share_embeddings=tied_all, eos_id=0, unk_id=1,
        pad_id=decoder_vocab_size - 1, source_pad_id=vocab_size - 1, decoder_start_id=decoder_vocab_size - 1,
        max_position_embeddings=option("max-length", 512) or 512,
        dropout=float(option("transformer-dropout", 0.1) or 0.0),
        attention_dropout=float(option("transformer-dropout-attention", 0.0) or 0.0),
        activation_dropout=float(option("transformer-dropout-ffn", 0.0) or 0.0),
    )


def _opus_mt_weights(npz, config, path):
    names = set(npz.files)

    def take(name):
        if name not in names:
            raise CheckpointError(f"{path}: `{name}` is missing")
        return np.asarray(npz[name])

    weights = {}
    decoder_blocks = (("self", "self_attn"), ("context", "encoder_attn"))
    for stack, depth, blocks in (("encoder", config.encoder_layers, (("self", "self_attn"),)),
                                 ("decoder", config.decoder_layers, decoder_blocks)):
        for index in range(depth):
            prefix, ours = f"{stack}_l{index + 1}_", f"{stack}.layers.{index}."
            for marian_block, block in blocks:
                for marian_name, name in _NPZ_ATTENTION.items():
                    array = take(prefix + f"{marian_block}_{marian_name}")
                    weights[ours + f"{block}.{name}"] = array.T if marian_name.startswith("W") else array.reshape(-1)
                weights[ours + f"{block}_layer_norm.weight"] = take(prefix + f"{marian_block}_Wo_ln_scale").reshape(-1)
                weights[ours + f"{block}_layer_norm.bias"] = take(prefix + f"{marian_block}_Wo_ln_bias").reshape(-1)
            weights[ours + "fc1.weight"] = take(prefix + "ffn_W1").T
            weights[ours + "fc1.bias"] = take(prefix + "ffn_b1").reshape(-1)
            weights[ours + "fc2.weight"] = take(prefix + "ffn_W2").T
            weights[ours + "fc2.bias"] = take(prefix + "ffn_b2").reshape(-1)
            weights[ours + "final_layer_norm.weight"] = take(prefix + "ffn_ffn_ln_scale").reshape(-1)
            weights[ours + "final_layer_norm.bias"] = take(prefix + "ffn_ffn_ln_bias").reshape(-1)
        extra = f"{stack}_l{depth + 1}_self_Wq"
        if extra in names:
            raise CheckpointError(f"{path}: more {stack} layers than the {depth} configured (`{extra}`)")
    if "decoder_ff_logit_out_W" in names:
        raise CheckpointError(f"{path}: `decoder_ff_logit_out_W` is an untied output projection, which our model "
                              "does not have")

    def with_pad_row(array):
        return np.concatenate([array, np.zeros((1,) + array.shape[1:], array.dtype)], axis=0)

    if config.share_embeddings:
        weights["shared.weight"] = with_pad_row(take("Wemb"))
    else:
        source = "encoder_Wemb" if "encoder_Wemb" in names else "Wemb"
        weights["encoder.embed_tokens.weight"] = with_pad_row(take(source))
        weights["decoder.embed_tokens.weight"] = with_pad_row(take("decoder_Wemb"))
    if "decoder_ff_logit_out_b" in names:
        bias = take("decoder_ff_logit_out_b").reshape(-1)
        weights["final_logits_bias"] = np.concatenate([bias, np.zeros((1,), bias.dtype)])
    return weights
