"""x-transformers' forms on the traced graph, each on a small hand-written module, equal in float64 (outputs, input
and parameter gradients, free parameters): ``callable(x)`` answers as on the example while tracing; positions
times a constant are ``learned_position(scale)``; ``ln(x) * (γ + c)`` is ``layer_norm(bias = false, offset = c)``
(and ``nn.LayerNorm(bias=False)`` converts); attention written with ``einsum`` and queries multiplied by a constant
map onto the attention ξ, a float32 softmax cast back as ``softmax_upcast`` and a causal ``masked_fill`` as
``causal = true``; near misses are refused at their line."""

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


class _Causal(_Einsum):
    """The eager attention with x-transformers' causal mask: ``sim.masked_fill(triu(1), −max)`` (``shift``: the
    diagonal blocked too, no causal mask)."""

    def __init__(self, shift=0):
        super().__init__(torch.float32)
        self.shift = shift

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).reshape(b, t, self.h, self.d).permute(0, 2, 1, 3) for p in (self.q, self.k, self.v))
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.d ** -0.5
        sim = sim.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1 - self.shift), -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1, dtype=torch.float32).type(sim.dtype)
        return self.o(torch.einsum("b h i j, b h j d -> b h i d", attn, v).permute(0, 2, 1, 3).reshape(b, t, -1))


def test_a_float32_softmax_cast_back_is_softmax_upcast():
    """x-transformers' Attend takes the softmax in float32 and casts back: ``softmax_upcast``, float32 weights in a
    float64 model, equal in both lowerings; with a causal masked_fill too."""
    torch.manual_seed(0)
    spec = assert_same_model(_Einsum(torch.float32), (rand(2, 5, 16, seed=3),))
    assert "attention(rank = 4, scale = 0.15, softmax_upcast = true)" in spec.text
    spec = assert_same_model(_Causal(), (rand(2, 5, 16, seed=3),))
    assert "attention(rank = 4, causal = true, softmax_upcast = true)" in spec.text


def test_softmax_upcast_is_float32_arithmetic():
    from rpn2c.components.impl.xi_attention import _masked_softmax

    logits = rand(2, 5, 5, seed=1) * 4
    want = torch.softmax(logits.float(), dim=-1).double()
    assert torch.equal(_masked_softmax(logits, None, True, upcast=True), want)
    assert 1e-12 < (want - torch.softmax(logits, dim=-1)).abs().max() < 1e-6


def test_near_misses_are_refused_at_their_line():
    with pytest.raises(TorchImportError) as info:  # a half-precision softmax: no upcast form
        rpn2c.from_torch(_Einsum(torch.float16).double(), (rand(2, 5, 16, seed=3),))
    assert "the softmax runs in torch.float16" in str(info.value) and info.value.library_file == __file__
    with pytest.raises(TorchImportError) as info:  # the diagonal blocked too: no causal mask
        rpn2c.from_torch(_Causal(shift=1).double(), (rand(2, 5, 16, seed=3),))
    assert "masked_fill'ed by no causal mask" in str(info.value)
