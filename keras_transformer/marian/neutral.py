"""The neutral Marian checkpoint both folder layouts are read into
(`checkpoint.py` for Hugging Face folders, `opus_mt.py` for OPUS-MT releases),
and the checks they share: what our model can represent, and the embedding and
layer arrays it needs, each refusal naming the file and key."""

import dataclasses
import json
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
    `final_logits_bias` is 1-D; a mapping that reads a safetensors file's
    arrays when asked for them), the folder and the weights file read."""

    config: MarianConfig
    weights: dict
    folder: Path
    weights_file: Path


def refuse_unless(condition, path, key, value, why):
    """Raises `CheckpointError` naming `path` and `key: value` unless `condition`."""
    if not condition:
        raise CheckpointError(f"{path}: `{key}: {json.dumps(value)}` is not supported: {why}")


def complete_embeddings(config, weights, path, size_keys=("vocab_size", "decoder_vocab_size")):
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
