"""MarianMT / OPUS-MT weights in and out (keras_transformer.marian), proved
against Transformers' `MarianMTModel` (torch, CPU): tiny random models saved
with `save_pretrained`, a Marian `.npz` and a TF-era `tf_model.h5` written
here from the same weights, and our own random models written back."""

import json
import math
import shutil

import keras
import numpy as np
import pytest

from required_imports import required

torch = required("torch")
transformers = required("transformers")
required("safetensors")

from keras_transformer.decoding import greedy_search  # noqa: E402
from keras_transformer.marian.checkpoint import CheckpointError, read_checkpoint  # noqa: E402
from keras_transformer.marian.convert import transformer_from_checkpoint, write_marian_hf  # noqa: E402
from keras_transformer.marian.ids import BOS_LOGIT_BIAS  # noqa: E402
from keras_transformer.models.transformer import Transformer  # noqa: E402
from keras_transformer.data.special_tokens import BOS_ID  # noqa: E402

# name: (MarianConfig keywords beyond the common ones)
VARIANTS = {
    "shared_swish": dict(vocab_size=40, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
                         decoder_attention_heads=4, activation_function="swish"),
    "separate_relu": dict(vocab_size=40, decoder_vocab_size=30, share_encoder_decoder_embeddings=False,
                          encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                          activation_function="relu"),
    "shared_gelu": dict(vocab_size=36, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, activation_function="gelu"),
}


def _random_like(name, shape, generator):
    """Weights that make every layer matter (Transformers' init, 0.02, makes
    a random model's outputs nearly constant): unit-scale projections
    (std 1/sqrt(fan-in)), embeddings of std 0.5, small biases, layer norms
    near the identity."""
    noise = torch.randn(shape, generator=generator)
    if "norm" in name or "gamma" in name or "beta" in name:
        return (1.0 if name.endswith(("weight", "gamma")) else 0.0) + 0.1 * noise
    if len(shape) == 2 and "embed" not in name and "shared" not in name:
        return noise / math.sqrt(shape[-1] if "." in name else shape[0])
    return (0.5 if len(shape) == 2 else 0.1) * noise


def _marian_model(variant, seed):
    options = dict(VARIANTS[variant])
    target_size = options.get("decoder_vocab_size", options["vocab_size"])
    pad = target_size - 1
    config = transformers.MarianConfig(
        d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32, scale_embedding=True, pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0, max_position_embeddings=64,
        dropout=0.1, **options,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name:  # Marian's sinusoids (not saved, recomputed on load)
                continue
            parameter.copy_(_random_like(name, tuple(parameter.shape), generator))
        bias = 0.2 * torch.randn((1, target_size), generator=generator)
        bias[0, pad] = 0.0  # as Transformers' OPUS-MT converter leaves it
        model.final_logits_bias.copy_(bias)
        # Marian's pad rows are zero (it decodes from a zero vector).
        model.get_decoder().embed_tokens.weight[pad] = 0.0
        if not config.share_encoder_decoder_embeddings:
            model.get_encoder().embed_tokens.weight[options["vocab_size"] - 1] = 0.0
    return model


@pytest.fixture(scope="module")
def marian_folders(tmp_path_factory):
    """{variant: (folder, MarianMTModel)}, saved once per module."""
    folders = {}
    for seed, variant in enumerate(VARIANTS):
        model = _marian_model(variant, seed)
        folder = tmp_path_factory.mktemp(variant)
        model.save_pretrained(folder)
        if not model.config.share_encoder_decoder_embeddings:
            # The source vocabulary's pad is its last id (as in the .npz); its
            # vocab.json says so (Transformers' config has one pad id, the target's).
            size = model.config.vocab_size
            (folder / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "<pad>": size - 1}))
        folders[variant] = (folder, model)
    return folders


def _source_batch(size, seed, pad_id=None):
    """Two Marian source rows ending with EOS 0; the second padded with the
    source pad (default size - 1), with their attention mask."""
    pad_id = size - 1 if pad_id is None else pad_id
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, size - 1, size=(2, 7))
    ids[ids == pad_id] = 2
    ids[:, -1] = 0
    ids[1, 4] = 0
    ids[1, 5:] = pad_id
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    return ids, mask


def _hf_logits(model, source, mask, decoder_inputs):
    with torch.no_grad():
        return model(input_ids=torch.tensor(source), attention_mask=torch.tensor(mask),
                     decoder_input_ids=torch.tensor(decoder_inputs)).logits.numpy()


def _our_logits(model, source, target):
    return keras.ops.convert_to_numpy(model({"source": np.asarray(source, "int32"),
                                             "target": np.asarray(target, "int32")}))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_imported_logits_equal_transformers(marian_folders, variant):
    folder, reference = marian_folders[variant]
    model, info = transformer_from_checkpoint(folder)
    source_ids, target_ids = info["source_ids"], info["target_ids"]
    assert model.vocabulary_size == reference.config.decoder_vocab_size + 1
    source, mask = _source_batch(reference.config.vocab_size, 1, source_ids.pad_id)
    assert source_ids.pad_id == reference.config.vocab_size - 1
    rng = np.random.default_rng(2)
    decoder_inputs = np.concatenate([np.full((2, 1), target_ids.pad_id),
                                     rng.integers(0, target_ids.size - 1, size=(2, 5))], axis=1)
    expected = _hf_logits(reference, source, mask, decoder_inputs)
    # Marian starts from pad; we start from BOS.
    ours_target = np.concatenate([np.full((2, 1), BOS_ID), target_ids.ours(decoder_inputs[:, 1:])], axis=1)
    logits = _our_logits(model, source_ids.ours(source), ours_target)
    others = np.arange(model.vocabulary_size) != BOS_ID
    # Padded source positions change nothing, so every target position compares.
    np.testing.assert_allclose(logits[..., others], expected[..., target_ids.marian_of_ours[others]], atol=1e-4)
    # BOS never wins and adds nothing to the normaliser.
    assert np.all(logits[..., BOS_ID] < BOS_LOGIT_BIAS / 2)
    log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits, axis=-1))
    expected_log_probs = expected - np.log(np.sum(np.exp(expected - expected.max(-1, keepdims=True)), -1,
                                                  keepdims=True)) - expected.max(-1, keepdims=True)
    np.testing.assert_allclose(log_probs[..., others], expected_log_probs[..., target_ids.marian_of_ours[others]],
                               atol=1e-4)


def test_import_is_float32_whatever_the_global_policy(marian_folders):
    """A process that trained with mixed_bfloat16 before (runs.train sets the policy globally) imported
    a bfloat16 model (recipes/opus_mt/trip.py's scores of it differed from the native model's); failed
    before the import built its model under float32."""
    keras.config.set_dtype_policy("mixed_bfloat16")  # the suite's conftest restores the caller's
    model, _ = transformer_from_checkpoint(marian_folders["shared_gelu"][0])
    policies = {layer.dtype_policy.name for layer in model._flatten_layers()}
    assert policies == {"float32"}
    assert keras.config.dtype_policy().name == "mixed_bfloat16"


def _hf_greedy(model, source, mask, length, **options):
    with torch.no_grad():
        output = model.generate(input_ids=torch.tensor(source), attention_mask=torch.tensor(mask), num_beams=1,
                                do_sample=False, max_new_tokens=length, forced_eos_token_id=None, **options)
    output = output.numpy()[:, 1:]  # without the decoder start
    padded = np.full((output.shape[0], length), model.config.pad_token_id)
    padded[:, :output.shape[1]] = output
    return padded


def test_imported_greedy_equals_generate(marian_folders):
    # One variant: the written-back tests below run greedy on separate vocabularies.
    folder, reference = marian_folders["shared_swish"]
    model, info = transformer_from_checkpoint(folder)
    source_ids, target_ids = info["source_ids"], info["target_ids"]
    source, mask = _source_batch(reference.config.vocab_size, 3)
    length = 6
    expected = _hf_greedy(reference, source, mask, length, bad_words_ids=[[target_ids.pad_id]])
    ours = greedy_search(model, source_ids.ours(source).astype("int32"), max_output_length=length, compile=False)
    ids = keras.ops.convert_to_numpy(ours["ids"])
    assert np.array_equal(target_ids.marian(ids), expected)


def _marian_npz_name(name):
    """Marian's .npz name of a Transformers per-layer weight name (test's own table)."""
    stack, _, index, rest = name.split(".", 3)
    prefix = f"{stack}_l{int(index) + 1}_"
    block, _, part = rest.rpartition(".")
    table = {
        "self_attn.q_proj": ("self_W", "self_b", "q"), "self_attn.k_proj": ("self_W", "self_b", "k"),
        "self_attn.v_proj": ("self_W", "self_b", "v"), "self_attn.out_proj": ("self_W", "self_b", "o"),
        "encoder_attn.q_proj": ("context_W", "context_b", "q"), "encoder_attn.k_proj": ("context_W", "context_b", "k"),
        "encoder_attn.v_proj": ("context_W", "context_b", "v"),
        "encoder_attn.out_proj": ("context_W", "context_b", "o"),
    }
    if block in table:
        matrix, bias, letter = table[block]
        return prefix + (matrix if part == "weight" else bias) + letter, part == "weight"
    norms = {"self_attn_layer_norm": "self_Wo_ln_", "encoder_attn_layer_norm": "context_Wo_ln_",
             "final_layer_norm": "ffn_ffn_ln_"}
    if block in norms:
        return prefix + norms[block] + ("scale" if part == "weight" else "bias"), False
    number = block[-1]  # fc1, fc2
    return prefix + ("ffn_W" if part == "weight" else "ffn_b") + number, part == "weight"


def _write_opus_mt_folder(folder, reference, more_options=""):
    """A Marian-layout .npz (no pad rows, (in, out) matrices, (1, n) vectors)
    and decoder.yml from a MarianMTModel's weights."""
    config = reference.config
    state = {name: tensor.numpy() for name, tensor in reference.state_dict().items()}
    arrays = {}
    for name, array in state.items():
        if ".layers." not in name:
            continue
        marian_name, is_matrix = _marian_npz_name(name[len("model."):])
        arrays[marian_name] = array.T if is_matrix else array.reshape(1, -1)
    shared = config.share_encoder_decoder_embeddings
    if shared:
        arrays["Wemb"] = state["model.shared.weight"][:-1]
    else:
        arrays["encoder_Wemb"] = state["model.encoder.embed_tokens.weight"][:-1]
        arrays["decoder_Wemb"] = state["model.decoder.embed_tokens.weight"][:-1]
    arrays["decoder_ff_logit_out_b"] = state["final_logits_bias"][:, :-1]
    activation = {"swish": "swish", "relu": "relu", "gelu": "gelu"}[config.activation_function]
    model_yml = (
        "type: transformer\n"
        f"dim-emb: {config.d_model}\n"
        f"dim-vocabs: [{config.vocab_size - 1}, {config.decoder_vocab_size - 1}]\n"
        f"enc-depth: {config.encoder_layers}\ndec-depth: {config.decoder_layers}\n"
        f"transformer-heads: {config.encoder_attention_heads}\n"
        f"transformer-dim-ffn: {config.encoder_ffn_dim}\n"
        f"transformer-ffn-activation: {activation}\n"
        "transformer-ffn-depth: 2\ntransformer-preprocess: \"\"\ntransformer-postprocess: dan\n"
        "transformer-postprocess-emb: d\ntransformer-decoder-autoreg: self-attention\n"
        f"tied-embeddings: true\ntied-embeddings-all: {'true' if shared else 'false'}\n"
        "transformer-dropout: 0.1\n"
    ) + more_options  # a repeated key: YAML keeps the last
    arrays["special:model.yml"] = np.frombuffer(model_yml.encode() + b"\x00", dtype=np.int8)
    np.savez(folder / "opus.model1.npz", **arrays)
    (folder / "decoder.yml").write_text("models:\n  - opus.model1.npz\nbeam-size: 4\nnormalize: 1\n")


@pytest.mark.parametrize("variant", ["shared_swish", "separate_relu"])
def test_opus_mt_npz_gives_the_same_checkpoint(marian_folders, tmp_path, variant):
    folder, reference = marian_folders[variant]
    _write_opus_mt_folder(tmp_path, reference)
    from_npz, from_hf = read_checkpoint(tmp_path), read_checkpoint(folder)
    assert from_npz.weights_file.name == "opus.model1.npz"
    assert (from_npz.config.num_beams, from_npz.config.length_penalty) == (4, 1.0)
    for field in ("d_model", "encoder_layers", "decoder_layers", "num_heads", "ffn_dim", "activation",
                  "vocab_size", "decoder_vocab_size", "share_embeddings", "eos_id", "pad_id", "source_pad_id",
                  "decoder_start_id", "dropout"):
        assert getattr(from_npz.config, field) == getattr(from_hf.config, field), field
    assert sorted(from_npz.weights) == sorted(from_hf.weights)
    for name, array in from_hf.weights.items():
        np.testing.assert_array_equal(from_npz.weights[name], array, err_msg=name)


def test_tf_era_h5_gives_the_same_checkpoint(marian_folders, tmp_path):
    import h5py

    folder, reference = marian_folders["shared_swish"]
    # A 2021 folder: generation settings in config.json, no generation_config.json.
    _copy_config(folder, tmp_path, num_beams=6, max_length=512)
    # TFMarianMTModel's Keras weight names (kernels (in, out), gamma/beta).
    root = "model/tf_marian_mt_model/model/"
    with h5py.File(tmp_path / "tf_model.h5", "w") as file:
        for name, tensor in reference.state_dict().items():
            array = tensor.numpy()
            if ".layers." in name:
                stack, _, index, rest = name[len("model."):].split(".", 3)
                block, _, part = rest.rpartition(".")
                is_norm = block.endswith("layer_norm")
                leaf = ("gamma" if is_norm else "kernel") if part == "weight" else ("beta" if is_norm else "bias")
                file[f"{root}{stack}/layers.{index}/{block.replace('.', '/')}/{leaf}:0"] = (
                    array.T if leaf == "kernel" else array)
            elif name == "model.shared.weight":
                file["model/model.shared/embeddings:0"] = array
            elif name == "final_logits_bias":
                file["final_logits_bias/final_logits_bias:0"] = array
        file[f"{root}encoder/embed_positions/weight:0"] = np.zeros((64, 16), np.float32)
    from_h5, from_hf = read_checkpoint(tmp_path), read_checkpoint(folder)
    assert from_h5.weights_file.name == "tf_model.h5"
    assert (from_h5.config.num_beams, from_h5.config.max_length) == (6, 512)
    assert sorted(from_h5.weights) == sorted(from_hf.weights)
    for name, array in from_hf.weights.items():
        np.testing.assert_array_equal(from_h5.weights[name], array, err_msg=name)


# ---------------------------------------------------------------- back out


def _random_native_model(separate, seed):
    # A source vocabulary smaller than the target's: the exported pad id must fit both.
    model = Transformer(vocabulary_size=23, source_vocabulary_size=19 if separate else None, d_model=16,
                        num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=2, dropout=0.0,
                        activation="relu" if separate else "gelu", output_bias=separate)
    model.build()
    generator = torch.Generator().manual_seed(seed)
    for variable in model.weights:
        # Keras names: kernels are (in, out), so the fan-in is shape[0].
        name = variable.path.replace("/", "_")
        variable.assign(_random_like(name, tuple(variable.shape), generator).numpy())
    return model


@pytest.fixture(scope="module")
def written_native_models(tmp_path_factory):
    """{separate: (our model, its MarianMT folder)}."""
    written = {}
    for separate in (False, True):
        model = _random_native_model(separate, 5 + separate)
        folder = tmp_path_factory.mktemp(f"native_{'separate' if separate else 'shared'}")
        write_marian_hf(model, folder, generation={"num_beams": 4})
        written[separate] = (model, folder)
    return written


@pytest.mark.parametrize("separate", [False, True])
def test_written_model_gives_our_logits_and_greedy_ids_in_transformers(written_native_models, separate):
    model, folder = written_native_models[separate]
    reference = transformers.MarianMTModel.from_pretrained(folder).eval()
    source_vocabulary = model.source_vocabulary_size or model.vocabulary_size
    rng = np.random.default_rng(7)
    source = rng.integers(4, source_vocabulary, size=(2, 6))
    source[:, -1] = 3
    source[1, 3], source[1, 4:] = 3, 0
    target = np.concatenate([np.full((2, 1), BOS_ID), rng.integers(3, model.vocabulary_size, size=(2, 4))], axis=1)
    hf_source = np.asarray(model_ids(model, "source").marian(source))
    mask = (source != 0).astype("int64")
    expected = _hf_logits(reference, hf_source, mask, model_ids(model, "target").marian(target))
    logits = _our_logits(model, source, target)
    # Our layer norms' epsilon is 1e-6, Transformers' 1e-5: close, not equal.
    np.testing.assert_allclose(logits, expected[..., model_ids(model, "target").marian_of_ours], atol=1e-4)

    if not separate:
        return  # greedy once: on separate vocabularies with an output bias (fewer searches in the suite)
    generation = json.loads((folder / "generation_config.json").read_text())
    length = 6
    expected_ids = _hf_greedy(reference, hf_source, mask, length)
    assert generation["bad_words_ids"] == [[reference.config.pad_token_id], [reference.config.decoder_start_token_id]]
    ours = greedy_search(model, source.astype("int32"), max_output_length=length, compile=False)
    ids = keras.ops.convert_to_numpy(ours["ids"])
    assert np.array_equal(model_ids(model, "target").marian(ids), expected_ids)


def model_ids(model, side):
    from keras_transformer.marian.convert import export_ids

    source, target = export_ids(model)
    return source if side == "source" else target


@pytest.mark.parametrize("variant", ["separate_relu"])
def test_written_models_come_back_with_the_same_ids_and_weights(marian_folders, written_native_models, tmp_path,
                                                               variant):
    """Our export's BOS is a real id, the decoder start: importing the
    folder maps it back to our BOS, so nothing grows or moves."""
    imported, _ = transformer_from_checkpoint(marian_folders[variant][0])
    write_marian_hf(imported, tmp_path)
    native, native_folder = written_native_models[True]
    for model, folder, layout in ((imported, tmp_path, "concatenated"), (native, native_folder, "interleaved")):
        again, info = transformer_from_checkpoint(folder, sinusoid_layout=layout)
        assert info["target_ids"].bos_id == 2 and info["source_ids"].bos_id == 2
        assert (again.vocabulary_size, again.source_vocabulary_size) == (model.vocabulary_size,
                                                                         model.source_vocabulary_size)
        def inside(variable):  # the path without the model's own name
            return variable.path.split("/", 1)[1]

        ours = {inside(variable): keras.ops.convert_to_numpy(variable) for variable in model.weights}
        assert sorted(ours) == sorted(inside(variable) for variable in again.weights)
        for variable in again.weights:
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), ours[inside(variable)],
                                          err_msg=variable.path)


# ---------------------------------------------------------------- bad input


def _copy_config(source, destination, **changes):
    config = json.loads((source / "config.json").read_text())
    config.update(changes)
    (destination / "config.json").write_text(json.dumps(config))


def test_bad_folders_are_refused_naming_the_file(marian_folders, tmp_path):
    folder, _ = marian_folders["shared_swish"]
    cases = {}
    for case in ("no_weights", "bart", "vocabulary", "pickle", "pre_norm"):
        cases[case] = tmp_path / case
        cases[case].mkdir()
    _copy_config(folder, cases["no_weights"])
    _copy_config(folder, cases["bart"], model_type="bart")
    _copy_config(folder, cases["vocabulary"], vocab_size=41, decoder_vocab_size=41, pad_token_id=40,
                 decoder_start_token_id=40)
    shutil.copy(folder / "model.safetensors", cases["vocabulary"] / "model.safetensors")
    _copy_config(folder, cases["pickle"])
    (cases["pickle"] / "pytorch_model.bin").write_bytes(b"not to be unpickled")
    _copy_config(folder, cases["pre_norm"], normalize_before=True)
    expected = {
        "no_weights": r"no_weights: no weights file \(model.safetensors or tf_model.h5\)",
        "bart": r"bart/config.json: `model_type` is 'bart'",
        "vocabulary": r"vocabulary/model.safetensors: the encoder embedding has shape \(40, 16\).* 41 tokens",
        "pickle": r"pickle/pytorch_model.bin: only pickled weights.*safe_serialization=True",
        "pre_norm": r"pre_norm/config.json: `normalize_before: true` is not supported",
    }
    for case, message in expected.items():
        with pytest.raises(CheckpointError, match=message):
            read_checkpoint(cases[case])
    with pytest.raises(CheckpointError, match="not a folder"):
        read_checkpoint(tmp_path / "absent")
    pre_norm_npz = tmp_path / "pre_norm_npz"
    pre_norm_npz.mkdir()
    _write_opus_mt_folder(pre_norm_npz, marian_folders["shared_swish"][1], "transformer-preprocess: n\n")
    with pytest.raises(CheckpointError, match=r"opus.model1.npz \(special:model.yml\): `transformer-preprocess: "
                                               r"\"n\"` is not supported"):
        read_checkpoint(pre_norm_npz)
