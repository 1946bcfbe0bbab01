"""x-transformers' forms on the traced graph, each on a small hand-written module, equal in float64 (outputs, input
and parameter gradients, free parameters): ``callable(x)`` answers as on the example while tracing; positions
times a constant are ``learned_position(scale)``; ``ln(x) * (γ + c)`` is ``layer_norm(bias = false, offset = c)``
(and ``nn.LayerNorm(bias=False)`` converts); attention written with ``einsum`` and queries multiplied by a constant
map onto the attention ξ; a softmax taken in float32 is refused at its line."""

from __future__ import annotations

import pytest
import torch
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import rand

import rpn2c
from rpn2c.frontends import TorchImportError


def _default(arg, fallback):
    return arg() if callable(arg) else (fallback if arg is None else arg)


class _Embedded(nn.Module):
    """Token embedding plus scaled learned positions (x-transformers' AbsolutePositionalEmbedding), then a
    LayerNorm without affine times ``γ + 1`` (its LayerNorm with unit_offset) and ``default(context, x)``."""

    def __init__(self, d=8):
        super().__init__()
        self.tok, self.pos = nn.Embedding(20, d), nn.Embedding(10, d)
        self.ln = nn.LayerNorm(d, elementwise_affine=False)
        self.gamma = nn.Parameter(torch.rand(d) - 0.5)
        self.out = nn.Linear(d, 3)

    def forward(self, ids):
        x = self.tok(ids.long()) + self.pos(torch.arange(ids.shape[1])) * 8 ** -0.5
        x = _default(x, None)  # callable(x) of the traced tensor: False, as on the example
        return self.out(self.ln(x) * (self.gamma + 1.0))


def test_scaled_positions_and_an_offset_layer_norm_weight():
    torch.manual_seed(0)
    ids = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(1))
    spec = assert_same_model(_Embedded(), (ids,))
    assert f"learned_position(tok, max_len = 10, scale = {8 ** -0.5!r})" in spec.text
    assert "layer_norm(pos, eps = 1e-05, bias = false, offset = 1.0)" in spec.text


def test_a_layer_norm_without_bias_converts():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4, bias=False))
    with torch.no_grad():
        m[1].weight.uniform_(0.5, 1.5)
    assert "layer_norm(eps = 1e-05, bias = false)" in assert_same_model(m, (rand(2, 5, 3, seed=1),)).text


class _Einsum(nn.Module):
    """x-transformers' eager attention: heads split by a reshape and permute, q times a factor made from sizes,
    ``einsum`` scores scaled, softmax (``dtype``: in another dtype), an ``nn.Dropout``, ``einsum`` with v."""

    def __init__(self, dtype=None, e=16, heads=2, d=4):
        super().__init__()
        self.h, self.d, self.dtype = heads, d, dtype
        self.q, self.k, self.v = (nn.Linear(e, heads * d, bias=False) for _ in range(3))
        self.o, self.drop = nn.Linear(heads * d, e), nn.Dropout(0.1)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).reshape(b, t, self.h, self.d).permute(0, 2, 1, 3) for p in (self.q, self.k, self.v))
        q = q * (0.25 / q.shape[-1] ** -0.5)
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * 0.3
        attn = self.drop(sim.softmax(dim=-1, dtype=self.dtype).type(sim.dtype))
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.o(out.permute(0, 2, 1, 3).reshape(b, t, -1))


def test_einsum_attention_with_a_query_factor_converts():
    torch.manual_seed(0)
    spec = assert_same_model(_Einsum(), (rand(2, 5, 16, seed=3),))
    assert "attention(rank = 4, scale = 0.15)" in spec.text and spec.text.count("= head(") == 1


def test_a_softmax_in_float32_is_refused():
    with pytest.raises(TorchImportError) as info:
        rpn2c.from_torch(_Einsum(torch.float32).double(), (rand(2, 5, 16, seed=3),))
    assert "the softmax runs in torch.float32" in str(info.value) and info.value.library_file == __file__
