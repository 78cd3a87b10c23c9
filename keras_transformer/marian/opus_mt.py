"""Reading an OPUS-MT release folder (Marian's own `.npz`) into the neutral
`MarianCheckpoint` of `neutral.py`.

The model's configuration is the `special:model.yml` entry of the `.npz`, the
decoding settings `decoder.yml`. Marian stores a projection as (in, out) and
its vocabularies without a pad row; both are turned into Transformers' layout
(a zero pad row appended), so a release and its Hugging Face conversion give
the same checkpoint. `numpy.load(allow_pickle=False)` only.
"""

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
    weights = complete_embeddings(config, weights, path, ("dim-vocabs + 1", "dim-vocabs + 1"))
    return MarianCheckpoint(config, weights, folder, path)


def _opus_mt_config(options, path):
    where = f"{path} (special:model.yml)"

    def option(key, default=None):
        return options.get(key, default)

    model_type = option("type", "transformer")
    refuse_unless(model_type == "transformer", where, "type", model_type, "only Marian transformers are read")
    preprocess = option("transformer-preprocess", "") or ""
    refuse_unless(preprocess in ("", "d"), where, "transformer-preprocess", preprocess,
                   "our Marian import is post-norm only (no `n` before a sub-layer)")
    postprocess = option("transformer-postprocess", "dan")
    refuse_unless(postprocess == "dan", where, "transformer-postprocess", postprocess,
                   "sub-layers must end with dropout, add, norm (`dan`)")
    post_emb = option("transformer-postprocess-emb", "d") or ""
    refuse_unless(post_emb in ("", "d"), where, "transformer-postprocess-emb", post_emb,
                   "no layer norm on the embeddings")
    autoregression = option("transformer-decoder-autoreg", "self-attention")
    refuse_unless(autoregression == "self-attention", where, "transformer-decoder-autoreg", autoregression,
                   "the decoder must use self-attention")
    for key in ("transformer-ffn-depth", "transformer-decoder-ffn-depth"):
        depth = option(key, 2) or 2
        refuse_unless(depth == 2, where, key, depth, "feed-forward networks have two layers")
    refuse_unless(not option("transformer-tied-layers"), where, "transformer-tied-layers",
                   option("transformer-tied-layers"), "layers must have their own weights")
    refuse_unless(not option("transformer-train-position-embeddings", False), where,
                   "transformer-train-position-embeddings", option("transformer-train-position-embeddings"),
                   "positions must be Marian's sinusoids")
    activation = option("transformer-ffn-activation", "swish")
    refuse_unless(activation in ACTIVATIONS, where, "transformer-ffn-activation", activation,
                   f"the activation must be one of {sorted(ACTIVATIONS)}")
    dim_emb = option("dim-emb")
    heads = option("transformer-heads", 8)
    ffn = option("transformer-dim-ffn", 2048)
    decoder_ffn = option("transformer-decoder-dim-ffn", ffn) or ffn
    refuse_unless(decoder_ffn == ffn, where, "transformer-decoder-dim-ffn", decoder_ffn,
                   f"our model has one feed-forward width ({ffn})")
    vocabs = option("dim-vocabs")
    if not isinstance(dim_emb, int) or not isinstance(vocabs, list) or len(vocabs) != 2:
        raise CheckpointError(f"{where}: `dim-emb` and a two-entry `dim-vocabs` are required")
    # One `Wemb` serves both sides with tied-embeddings-all or -src.
    tied_all = bool(option("tied-embeddings-all", False)) or bool(option("tied-embeddings-src", False))
    refuse_unless(bool(option("tied-embeddings-all", False)) or option("tied-embeddings", False), where,
                   "tied-embeddings", option("tied-embeddings"),
                   "the output projection must be the target embedding (tied)")
    # Marian's vocabularies have no pad; as Transformers' converter does, one
    # zero row is appended for it (and Marian decodes from a zero vector).
    vocab_size, decoder_vocab_size = vocabs[0] + 1, vocabs[1] + 1
    if tied_all and vocabs[0] != vocabs[1]:
        raise CheckpointError(f"{where}: one shared embedding (`tied-embeddings-all` or `-src`) but two "
                              f"vocabulary sizes {vocabs}")
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
