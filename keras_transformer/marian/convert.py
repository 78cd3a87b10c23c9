"""MarianMT weights onto our `Transformer`, and our `Transformer` back out as
a MarianMT folder that Transformers loads.

Import (`transformer_from_checkpoint`): a post-norm `Transformer` with
Marian's activation, layer-norm epsilon 1e-5, concatenated sinusoids and an
output bias (`final_logits_bias`, plus `BOS_LOGIT_BIAS` on our extra BOS
row), every weight set from a `MarianCheckpoint` through `MarianIds`.

Export (`write_marian_hf`): `config.json`, `generation_config.json` and
`model.safetensors` in Transformers' layout. Transformers recomputes Marian's
(concatenated) sinusoids on load and never reads them from the file; a model
with the paper's interleaved sinusoids is written with its model dimension
permuted (interleaved -> concatenated). The whole network is equivariant to a
permutation of the d_model axis (embeddings, the input side of every
projection reading the residual stream and the output side of every one
writing it, layer norms), so the permuted model computes the same logits.
Our BOS is a real Marian id (`MarianIds.for_export`), the
`decoder_start_token_id`, and `bad_words_ids` forbids pad and BOS as our
searches do.

Only numpy, keras, json and safetensors: no backend-specific code.
"""

import json
import os
import tempfile
from pathlib import Path

import keras
import numpy as np

from keras_transformer.marian.checkpoint import MarianCheckpoint, read_checkpoint
from keras_transformer.marian.ids import MarianIds

LAYER_NORM_EPSILON = 1e-5  # Transformers' MarianMT (torch.nn.LayerNorm's default)

_HF_ACTIVATIONS = {"silu": "swish", "swish": "swish", "gelu": "gelu", "relu": "relu"}

# Our attention sub-layers and Transformers' names for them.
_ATTENTION = (("query_projection", "q_proj"), ("key_projection", "k_proj"), ("value_projection", "v_proj"),
              ("output_projection", "out_proj"))


def interleaved_of_concatenated(d_model):
    """The permutation `perm` with `interleaved = concatenated[..., perm]`:
    dimension 2k (sine k) is concatenated k, 2k + 1 (cosine k) is d/2 + k."""
    half = d_model // 2
    perm = np.empty((d_model,), dtype=np.int64)
    perm[0::2] = np.arange(half)
    perm[1::2] = half + np.arange(half)
    return perm


def _layer_pairs(model, stacks=("encoder", "decoder")):
    """(our layer, Transformers' prefix, is_decoder) for every layer."""
    for stack in stacks:
        for index, layer in enumerate(getattr(model, stack).stacked_layers):
            yield layer, f"{stack}.layers.{index}.", stack == "decoder"


def _sublayers(layer, is_decoder):
    """(our attention or None, our norm, Transformers' block name) of a layer."""
    blocks = [(layer.self_attention, layer.self_attention_norm, "self_attn")]
    if is_decoder:
        blocks.append((layer.cross_attention, layer.cross_attention_norm, "encoder_attn"))
    return blocks


def _marian_arrays_to_ours(model, weights, perm):
    """(our variable, array) pairs from Transformers-named arrays ((out, in)),
    with the model axis permuted by `perm` (None: as it is); a generator,
    so that arrays read lazily are held one layer at a time."""

    def model_axis(array, axis):
        return array if perm is None else np.take(array, perm, axis=axis)

    for layer, prefix, is_decoder in _layer_pairs(model):
        assignments = []
        for attention, norm, block in _sublayers(layer, is_decoder):
            for ours, theirs in _ATTENTION:
                dense = getattr(attention, ours)
                kernel = weights[f"{prefix}{block}.{theirs}.weight"].T  # (in, out)
                bias = weights[f"{prefix}{block}.{theirs}.bias"]
                if ours == "output_projection":
                    kernel, bias = model_axis(kernel, 1), model_axis(bias, 0)
                else:
                    kernel = model_axis(kernel, 0)
                assignments += [(dense.kernel, kernel), (dense.bias, bias)]
            assignments += [(norm.gamma, model_axis(weights[f"{prefix}{block}_layer_norm.weight"], 0)),
                            (norm.beta, model_axis(weights[f"{prefix}{block}_layer_norm.bias"], 0))]
        feed_forward = layer.feed_forward
        assignments += [
            (feed_forward.inner.kernel, model_axis(weights[prefix + "fc1.weight"].T, 0)),
            (feed_forward.inner.bias, weights[prefix + "fc1.bias"]),
            (feed_forward.outer.kernel, model_axis(weights[prefix + "fc2.weight"].T, 1)),
            (feed_forward.outer.bias, model_axis(weights[prefix + "fc2.bias"], 0)),
            (layer.feed_forward_norm.gamma, model_axis(weights[prefix + "final_layer_norm.weight"], 0)),
            (layer.feed_forward_norm.beta, model_axis(weights[prefix + "final_layer_norm.bias"], 0)),
        ]
        yield from assignments


def _checkpoint_ids(config, checkpoint):
    """(target, source) `MarianIds`. Decoding from pad (Marian's way) gives
    our BOS an extra row; a folder with a start token of its own (as
    `write_marian_hf` writes: BOS at the same id in both vocabularies) maps
    that id to our BOS, so our model comes back with its own ids."""
    bos_id = None if config.decoder_start_id == config.pad_id else config.decoder_start_id
    try:
        target_ids = MarianIds(config.decoder_vocab_size, config.eos_id, config.unk_id, config.pad_id, bos_id)
        if config.share_embeddings:
            return target_ids, target_ids
        return target_ids, MarianIds(config.vocab_size, config.eos_id, config.unk_id, config.source_pad_id, bos_id)
    except ValueError as error:
        raise ValueError(f"{checkpoint.folder}: the special ids do not fit the vocabulary: {error}") from error


def _build_transformer(config, source_ids, target_ids, dropout, sinusoid_layout):
    """The built `Transformer` of a `MarianConfig` (weights not set)."""
    from keras_transformer.models.transformer import Transformer

    model = Transformer(
        vocabulary_size=target_ids.our_size,
        source_vocabulary_size=None if config.share_embeddings else source_ids.our_size,
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.ffn_dim,
        num_encoder_layers=config.encoder_layers,
        num_decoder_layers=config.decoder_layers,
        dropout=config.dropout if dropout is None else dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        activation=config.activation,
        norm_first=False,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        positional_encoding="sinusoidal",
        sinusoid_layout=sinusoid_layout,
        output_bias=True,
    )
    model.build()
    return model


def transformer_from_checkpoint(checkpoint, sinusoid_layout="concatenated", dropout=None):
    """Our `Transformer` with a Marian checkpoint's weights.

    Args:
        checkpoint: a `MarianCheckpoint` or a folder `read_checkpoint` reads.
        sinusoid_layout: "concatenated" (Marian's: the weights as they are) or
            "interleaved" (the paper's: the model axis permuted to match).
        dropout: overrides the checkpoint's dropout rate (for fine-tuning).

    Returns:
        (model, info): the built `Transformer`, and a dict with
        "source_ids" and "target_ids" (the `MarianIds` used: the tokenizer
        maps its pieces through them), "config" (the `MarianConfig`, with the
        generation settings found) and "weights_file".
    """
    if not isinstance(checkpoint, MarianCheckpoint):
        checkpoint = read_checkpoint(checkpoint)
    config, weights = checkpoint.config, checkpoint.weights
    if sinusoid_layout not in ("concatenated", "interleaved"):
        raise ValueError(f"`sinusoid_layout` must be 'concatenated' or 'interleaved', got {sinusoid_layout!r}")
    target_ids, source_ids = _checkpoint_ids(config, checkpoint)
    # The checkpoint's float32 model, whatever the caller's global policy: a process that trained
    # with mixed_bfloat16 before (runs.train sets it globally; recipes/opus_mt/trip.py fine-tunes
    # natively first) built and saved a bfloat16 model otherwise, whose scores differed.
    caller_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        model = _build_transformer(config, source_ids, target_ids, dropout, sinusoid_layout)
    finally:
        keras.config.set_dtype_policy(caller_policy)
    perm = None if sinusoid_layout == "concatenated" else interleaved_of_concatenated(config.d_model)

    def embedding(name, ids):
        rows = ids.our_rows(weights[name])
        return rows if perm is None else rows[:, perm]

    def assignments():
        yield model.target_embedding.embeddings, embedding("decoder.embed_tokens.weight", target_ids)
        if not config.share_embeddings:
            yield model.source_embedding.embeddings, embedding("encoder.embed_tokens.weight", source_ids)
        yield model.output_bias, target_ids.our_output_bias(weights["final_logits_bias"])
        yield from _marian_arrays_to_ours(model, weights, perm)

    for variable, array in assignments():
        if tuple(variable.shape) != tuple(array.shape):
            raise ValueError(f"{checkpoint.weights_file}: an array of shape {array.shape} for {variable.path} "
                             f"{tuple(variable.shape)}")
        variable.assign(np.asarray(array, dtype=variable.dtype))
    info = {"source_ids": source_ids, "target_ids": target_ids, "config": config,
            "weights_file": str(checkpoint.weights_file)}
    return model, info


# ---------------------------------------------------------------- export


def export_ids(model):
    """The (source, target) `MarianIds` `write_marian_hf` uses for `model`:
    `MarianIds.for_export` of each vocabulary (the same object when shared).
    The tokenizer writes `vocab.json` in this order: Marian id m is the
    piece of our id `ids.ours_of_marian[m]`.

    Separate vocabularies share one pad id, the smaller vocabulary's last:
    Transformers gives both embeddings `pad_token_id` as their padding index,
    which must lie inside each."""
    if model.source_vocabulary_size is None:
        target = MarianIds.for_export(model.vocabulary_size)
        return target, target
    pad_id = min(model.source_vocabulary_size, model.vocabulary_size) - 1
    return (MarianIds.for_export(model.source_vocabulary_size, pad_id),
            MarianIds.for_export(model.vocabulary_size, pad_id))


def _check_exportable(model):
    problems = []
    if model.norm_first:
        problems.append("norm_first=True (MarianMT is post-norm)")
    if model.positional_encoding != "sinusoidal":
        problems.append(f"positional_encoding={model.positional_encoding!r} (MarianMT has sinusoids)")
    if model.key_dim is not None:
        problems.append(f"key_dim={model.key_dim} (MarianMT's heads are d_model / heads wide)")
    activation = model.activation if isinstance(model.activation, str) else getattr(model.activation, "__name__", "")
    if activation not in _HF_ACTIVATIONS:
        problems.append(f"activation={model.activation!r} (MarianMT takes {sorted(_HF_ACTIVATIONS)})")
    if model.d_model % 2:
        problems.append(f"d_model={model.d_model} is odd")
    if getattr(model.target_embedding, "quantization_mode", None):
        problems.append("the model is quantized")
    if problems:
        raise ValueError("this model cannot be written as a MarianMT model: " + "; ".join(problems))
    return _HF_ACTIVATIONS[activation]


def _weights_for_hf(model, source_ids, target_ids):
    """Transformers-named float32 arrays of `model` ((out, in), concatenated
    sinusoid layout)."""
    perm = None
    if getattr(model, "sinusoid_layout", "interleaved") == "interleaved":
        # ours = marian[perm], so marian = ours[inverse].
        perm = np.argsort(interleaved_of_concatenated(model.d_model))

    def model_axis(array, axis):
        return array if perm is None else np.take(array, perm, axis=axis)

    def value(variable):
        return np.asarray(variable.numpy(), dtype=np.float32)

    weights = {}
    for layer, prefix, is_decoder in _layer_pairs(model):
        for attention, norm, block in _sublayers(layer, is_decoder):
            for ours, theirs in _ATTENTION:
                dense = getattr(attention, ours)
                kernel, bias = value(dense.kernel), value(dense.bias)
                if ours == "output_projection":
                    kernel, bias = model_axis(kernel, 1), model_axis(bias, 0)
                else:
                    kernel = model_axis(kernel, 0)
                weights[f"{prefix}{block}.{theirs}.weight"] = kernel.T
                weights[f"{prefix}{block}.{theirs}.bias"] = bias
            weights[f"{prefix}{block}_layer_norm.weight"] = model_axis(value(norm.gamma), 0)
            weights[f"{prefix}{block}_layer_norm.bias"] = model_axis(value(norm.beta), 0)
        feed_forward = layer.feed_forward
        weights[prefix + "fc1.weight"] = model_axis(value(feed_forward.inner.kernel), 0).T
        weights[prefix + "fc1.bias"] = value(feed_forward.inner.bias)
        weights[prefix + "fc2.weight"] = model_axis(value(feed_forward.outer.kernel), 1).T
        weights[prefix + "fc2.bias"] = model_axis(value(feed_forward.outer.bias), 0)
        weights[prefix + "final_layer_norm.weight"] = model_axis(value(layer.feed_forward_norm.gamma), 0)
        weights[prefix + "final_layer_norm.bias"] = model_axis(value(layer.feed_forward_norm.beta), 0)
    hf = {"model." + name: np.ascontiguousarray(array) for name, array in weights.items()}
    target = model_axis(target_ids.marian_rows(value(model.target_embedding.embeddings)), 1)
    if model.source_vocabulary_size is None:
        hf["model.shared.weight"] = np.ascontiguousarray(target)
    else:
        source = model_axis(source_ids.marian_rows(value(model.source_embedding.embeddings)), 1)
        hf["model.encoder.embed_tokens.weight"] = np.ascontiguousarray(source)
        hf["model.decoder.embed_tokens.weight"] = np.ascontiguousarray(target)
    bias = getattr(model, "output_bias", None)
    bias = np.zeros((model.vocabulary_size,), np.float32) if bias is None else value(bias)
    hf["final_logits_bias"] = np.ascontiguousarray(target_ids.marian_rows(bias).reshape(1, -1))
    return hf


def _write_atomically(path, write):
    """`write(temporary_path)`, then the file takes `path`'s name: a failure
    leaves no half-written file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_marian_hf(model, folder, generation=None, max_position_embeddings=512):
    """Writes `model` as a Transformers MarianMT folder: `config.json`,
    `generation_config.json` and `model.safetensors` (each file complete or
    absent). The tokenizer files (`vocab.json`, `source.spm`, `target.spm`)
    are the caller's, in the order of `export_ids(model)`.

    Args:
        model: a built `Transformer` (post-norm, sinusoidal, d_k = d_model /
            heads, activation relu, gelu or silu).
        folder: the output folder (created if needed).
        generation: Transformers generation settings to add (e.g.
            `{"num_beams": 4, "max_length": 512, "length_penalty": 1.0}`).
        max_position_embeddings: the longest sequence Transformers will take
            (its sinusoid table's rows; ours have no limit).

    Returns:
        (source_ids, target_ids): the `MarianIds` used.

    Note: Transformers' layer norms use epsilon 1e-5; a model trained with
    another (ours default to 1e-6) is written as it is and differs from
    Transformers' by that epsilon alone (about 1e-6 relative on the logits).
    """
    from safetensors.numpy import save_file

    activation = _check_exportable(model)
    source_ids, target_ids = export_ids(model)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shared = model.source_vocabulary_size is None
    pad_id, bos_id, eos_id = target_ids.pad_id, target_ids.bos_id, target_ids.eos_id
    config = {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "d_model": model.d_model,
        "encoder_layers": model.num_encoder_layers,
        "decoder_layers": model.num_decoder_layers,
        "encoder_attention_heads": model.num_heads,
        "decoder_attention_heads": model.num_heads,
        "encoder_ffn_dim": model.d_ff,
        "decoder_ffn_dim": model.d_ff,
        "activation_function": activation,
        "dropout": model.dropout,
        "attention_dropout": model.attention_dropout,
        "activation_dropout": model.activation_dropout,
        "vocab_size": source_ids.size,
        "decoder_vocab_size": target_ids.size,
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": True,
        "scale_embedding": True,
        "static_position_embeddings": True,
        "normalize_before": False,
        "max_position_embeddings": int(max_position_embeddings),
        "pad_token_id": pad_id,
        "eos_token_id": eos_id,
        "forced_eos_token_id": eos_id,
        "decoder_start_token_id": bos_id,
        "is_encoder_decoder": True,
        "num_hidden_layers": model.num_encoder_layers,
    }
    generation_config = {
        "decoder_start_token_id": bos_id,
        "eos_token_id": eos_id,
        "forced_eos_token_id": eos_id,
        "pad_token_id": pad_id,
        # Our searches never emit pad or BOS.
        "bad_words_ids": [[pad_id], [bos_id]],
        "max_length": int(max_position_embeddings),
    }
    generation_config.update(generation or {})
    weights = _weights_for_hf(model, source_ids, target_ids)

    def json_writer(value):
        def write(path):
            with open(path, "w", encoding="utf-8") as file:
                json.dump(value, file, indent=2)
                file.write("\n")
        return write

    _write_atomically(folder / "model.safetensors", lambda path: save_file(weights, path, metadata={"format": "pt"}))
    _write_atomically(folder / "generation_config.json", json_writer(generation_config))
    _write_atomically(folder / "config.json", json_writer(config))
    return source_ids, target_ids
