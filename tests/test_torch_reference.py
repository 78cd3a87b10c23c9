"""Numerical equivalence with an independent implementation: torch.nn.Transformer.

Weights are copied from a randomly initialised `torch.nn.Transformer` into our
encoder and decoder stacks; on random inputs with padding, outputs must agree
within 1e-4 in float32, for post-LN (the paper) and pre-LN. This runs under
every Keras backend: only the reference is computed with PyTorch.
"""

import numpy as np
import pytest

from required_imports import required  # noqa: E402

torch = required("torch")  # under CI=true a failed import fails the run

import keras_transformer as kt  # noqa: E402
from conftest import to_numpy  # noqa: E402

D_MODEL, HEADS, D_FF, LAYERS, EPS = 16, 4, 32, 2, 1e-5


def _t(tensor):
    return tensor.detach().numpy().astype("float32")


def _copy_dense(dense, weight, bias):
    dense.kernel.assign(_t(weight).T)
    dense.bias.assign(_t(bias))


def _copy_norm(norm, torch_norm):
    norm.gamma.assign(_t(torch_norm.weight))
    norm.beta.assign(_t(torch_norm.bias))


def _copy_attention(ours, theirs):
    w, b = theirs.in_proj_weight, theirs.in_proj_bias
    d = D_MODEL
    _copy_dense(ours.query_projection, w[:d], b[:d])
    _copy_dense(ours.key_projection, w[d : 2 * d], b[d : 2 * d])
    _copy_dense(ours.value_projection, w[2 * d :], b[2 * d :])
    _copy_dense(ours.output_projection, theirs.out_proj.weight, theirs.out_proj.bias)


def _copy_feed_forward(ours, theirs):
    _copy_dense(ours.inner, theirs.linear1.weight, theirs.linear1.bias)
    _copy_dense(ours.outer, theirs.linear2.weight, theirs.linear2.bias)


def _randomise_torch(module, generator):
    # Default LayerNorm weights are ones and zeros, which would hide a swapped
    # norm; draw every parameter at random instead.
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_encoder_decoder_match_torch_transformer(norm_first, rng):
    torch.manual_seed(0)
    reference = torch.nn.Transformer(
        d_model=D_MODEL,
        nhead=HEADS,
        num_encoder_layers=LAYERS,
        num_decoder_layers=LAYERS,
        dim_feedforward=D_FF,
        dropout=0.0,
        activation="relu",
        layer_norm_eps=EPS,
        batch_first=True,
        norm_first=norm_first,
    )
    if not norm_first:
        # torch.nn.Transformer always adds a final LayerNorm per stack; the
        # paper's post-LN model has none.
        reference.encoder.norm = None
        reference.decoder.norm = None
    _randomise_torch(reference, torch.Generator().manual_seed(1))
    reference.eval()

    common = dict(num_layers=LAYERS, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, dropout=0.0,
                  norm_first=norm_first, layer_norm_epsilon=EPS)
    encoder, decoder = kt.Encoder(**common), kt.Decoder(**common)
    encoder.build((None, None, D_MODEL))
    decoder.build((None, None, D_MODEL), (None, None, D_MODEL))
    for ours, theirs in zip(encoder.stacked_layers, reference.encoder.layers):
        _copy_attention(ours.self_attention, theirs.self_attn)
        _copy_feed_forward(ours.feed_forward, theirs)
        _copy_norm(ours.self_attention_norm, theirs.norm1)
        _copy_norm(ours.feed_forward_norm, theirs.norm2)
    for ours, theirs in zip(decoder.stacked_layers, reference.decoder.layers):
        _copy_attention(ours.self_attention, theirs.self_attn)
        _copy_attention(ours.cross_attention, theirs.multihead_attn)
        _copy_feed_forward(ours.feed_forward, theirs)
        _copy_norm(ours.self_attention_norm, theirs.norm1)
        _copy_norm(ours.cross_attention_norm, theirs.norm2)
        _copy_norm(ours.feed_forward_norm, theirs.norm3)
    if norm_first:
        _copy_norm(encoder.final_norm, reference.encoder.norm)
        _copy_norm(decoder.final_norm, reference.decoder.norm)

    batch, source_length, target_length = 3, 7, 5
    source = rng.normal(size=(batch, source_length, D_MODEL)).astype("float32")
    target = rng.normal(size=(batch, target_length, D_MODEL)).astype("float32")
    source_valid = np.ones((batch, source_length), bool)
    source_valid[1, 4:] = False
    source_valid[2, 6:] = False
    target_valid = np.ones((batch, target_length), bool)
    target_valid[0, 3:] = False

    with torch.no_grad():
        memory = reference.encoder(
            torch.from_numpy(source), src_key_padding_mask=torch.from_numpy(~source_valid)
        )
        expected = reference.decoder(
            torch.from_numpy(target),
            memory,
            tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(target_length),
            tgt_key_padding_mask=torch.from_numpy(~target_valid),
            memory_key_padding_mask=torch.from_numpy(~source_valid),
            tgt_is_causal=True,
        )

    source_mask = source_valid[:, None, :]
    causal = np.tril(np.ones((target_length, target_length), bool))[None]
    encoded = encoder(source, attention_mask=source_mask)
    decoded = decoder(
        target,
        encoded,
        self_attention_mask=causal & target_valid[:, None, :],
        cross_attention_mask=source_mask,
    )
    encoded, decoded = to_numpy(encoded), to_numpy(decoded)
    np.testing.assert_allclose(encoded[source_valid], _t(memory)[source_valid], atol=1e-4)
    np.testing.assert_allclose(decoded[target_valid], _t(expected)[target_valid], atol=1e-4)
