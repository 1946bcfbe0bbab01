"""nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer convert to specs equal to torch in float64
(outputs, parameter and input gradients, free-parameter count): post- and pre-norm, batch-first and time-first, relu
and gelu, a causal target mask given as ``tgt_mask`` (applied as given) or with ``tgt_is_causal=True`` (causal =
true), key-padding masks; the cross-attention heads read memory as their context and keys."""

from __future__ import annotations

import pytest
import torch
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import rand

import rpn2c
from rpn2c.frontends import TorchImportError


def _seq(bf, b, t, e, seed):
    x = rand(b, t, e, seed=seed)
    return x if bf else x.transpose(0, 1).contiguous()


def _causal(t):
    return nn.Transformer.generate_square_subsequent_mask(t, dtype=torch.float64)


def _padding(b, s, seed):
    blocked = torch.rand(b, s, generator=torch.Generator().manual_seed(seed)) < 0.4
    blocked[:, 0] = False
    return blocked


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_torch(norm_first, batch_first, activation):
    torch.manual_seed(0)
    m = nn.TransformerDecoderLayer(8, 2, 12, dropout=0.1, activation=activation, batch_first=batch_first,
                                   norm_first=norm_first)
    tgt, mem = _seq(batch_first, 2, 5, 8, 1), _seq(batch_first, 2, 3, 8, 2)
    spec = assert_same_model(m, (tgt, mem), {"tgt_mask": _causal(5), "tgt_is_causal": True})
    assert "causal = true" in spec.text and "context = memory" in spec.text and "keys = memory" in spec.text
    assert spec.text.count("pi = identity") == 2
    assert_same_model(m, (tgt, mem), {"tgt_mask": _causal(5)})


def test_decoder_layer_with_padding_masks_and_a_memory_mask():
    torch.manual_seed(1)
    m = nn.TransformerDecoderLayer(6, 3, 10, dropout=0.0, batch_first=True)
    tgt, mem = rand(2, 4, 6, seed=3), rand(2, 5, 6, seed=4)
    kw = {"tgt_mask": _causal(4), "memory_mask": rand(4, 5, seed=5),
          "tgt_key_padding_mask": _padding(2, 4, 6), "memory_key_padding_mask": _padding(2, 5, 7)}
    spec = assert_same_model(m, (tgt, mem), kw)
    assert "memory_mask: additive_mask[T, S]" in spec.text and "memory_key_padding_mask: block_mask[B, S]" in spec.text


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_matches_torch(norm_first, batch_first):
    torch.manual_seed(2)
    m = nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=12, dropout=0.0,
                       batch_first=batch_first, norm_first=norm_first)
    src, tgt = _seq(batch_first, 2, 6, 8, 7), _seq(batch_first, 2, 4, 8, 8)
    spec = assert_same_model(m, (src, tgt), {"tgt_mask": _causal(4)})
    first = "[S, B, 8]" if not batch_first else "[B, S, 8]"
    assert f"input src: {'sequence' if batch_first else 'time_major'}{first}" in spec.text
    assert spec.text.count("context = ") == 2  # one cross-attention head per decoder layer
    # the source and target lengths stay independent symbols: another pair of lengths runs
    model = spec.compile()
    src2, tgt2 = _seq(batch_first, 3, 2, 8, 9), _seq(batch_first, 3, 7, 8, 10)
    with torch.no_grad():
        torch.testing.assert_close(model(src2, tgt2, _causal(7)), m(src2, tgt2, tgt_mask=_causal(7)))


def test_transformer_with_the_causal_hint_and_memory_padding():
    torch.manual_seed(3)
    m = nn.Transformer(4, 1, 1, 1, 8, dropout=0.0, batch_first=True)
    src, tgt = rand(2, 5, 4, seed=11), rand(2, 3, 4, seed=12)
    kw = {"tgt_mask": _causal(3), "tgt_is_causal": True, "src_key_padding_mask": _padding(2, 5, 13),
          "memory_key_padding_mask": _padding(2, 5, 13)}
    spec = assert_same_model(m, (src, tgt), kw)
    assert "causal = true" in spec.text


def test_decoder_layer_with_another_activation_is_a_located_error():
    m = nn.TransformerDecoderLayer(4, 1, 8, activation=torch.tanh, batch_first=True).double()
    with pytest.raises(TorchImportError, match="activation=tanh"):
        rpn2c.from_torch(m, (rand(1, 2, 4), rand(1, 3, 4)))
