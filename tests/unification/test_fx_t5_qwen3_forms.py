"""T5's and Qwen3's forms on the traced graph (fx_norms.py, fx_position_bias.py, fx_attention.py): T5LayerNorm
(only the variance in float32) becomes ``rms_norm(upcast_variance = true)``, and a per-head bias made from the key −
query offset's buckets and one table becomes ``relative_bias`` read by the attention as ``attn_mask`` (``scale = 1.0``), equal in
float64; a table indexed by another code of the offset is refused at its line. Qwen3's RMSNorm of each head's
queries and keys becomes the attention's ``qk_norm = "rms"``; a norm of the queries alone is refused."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import rand

import rpn2c
from rpn2c.frontends import TorchImportError


class _T5Norm(nn.Module):
    """T5LayerNorm: the variance in float32, the float64 input scaled by it."""

    def __init__(self, e=8):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(e) + 0.5)

    def forward(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))


def test_t5_norm_is_rms_norm_with_the_variance_upcast():
    torch.manual_seed(0)
    spec = assert_same_model(_T5Norm(), (rand(2, 3, 8, seed=1) * 3,))
    assert "rms_norm(x, eps = 1e-06, upcast_variance = true)" in spec.text


def test_upcast_variance_is_t5s_arithmetic():
    """The mean square is float32's (the result differs from the float64 norm by its rounding); the input keeps
    its precision: T5LayerNorm's values bit for bit, in float64 and in half precision."""
    from rpn2c.components.impl.processing import RMSNormModule

    norm = RMSNormModule((16,), 1e-6, True, 0.0, upcast_variance=True).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = rand(3, 4, 16, seed=5) * 3
    want = norm.weight * (x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6))
    assert torch.equal(norm(x), want)
    plain = RMSNormModule((16,), 1e-6, True, 0.0).double()
    with torch.no_grad():
        plain.weight.copy_(norm.weight)
    assert 1e-12 < (norm(x) - plain(x)).abs().max() < 1e-5
    half = norm.to(torch.bfloat16)
    xh = x.to(torch.bfloat16)
    want = half.weight * (xh * torch.rsqrt(xh.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(half(xh), want)
    with pytest.raises(ValueError, match="exclude each other"):
        from rpn2c.components.processing import RMSNorm

        RMSNorm.HP(upcast=True, upcast_variance=True)


def _buckets(rel, bidirectional, n, max_distance):
    """T5's bucket of the offset j − i, written as a user would (not rpn2c's function)."""
    out = 0
    if bidirectional:
        n //= 2
        out = (rel > 0).long() * n
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    exact = n // 2
    large = exact + (torch.log(rel.float() / exact) / math.log(max_distance / exact) * (n - exact)).long()
    return out + torch.where(rel < exact, rel, large.clamp(max=n - 1))


class _BiasedAttention(nn.Module):
    """T5's attention: q, k, v, o without biases, no 1/√D scale, a per-head bias from a bucketed offset table
    (``clip``: the table indexed by the offset clipped to ±2 instead, Shaw's form, which is no T5 bucket)."""

    def __init__(self, bidirectional=True, max_distance=20, clip=False, e=16, heads=2):
        super().__init__()
        self.h, self.d, self.bidirectional, self.max_distance, self.clip = heads, e // heads, bidirectional, \
            max_distance, clip
        self.q, self.k, self.v, self.o = (nn.Linear(e, e, bias=False) for _ in range(4))
        self.table = nn.Embedding(16, heads)

    def bias(self, t):
        rel = torch.arange(t)[None, :] - torch.arange(t)[:, None]
        code = rel.clamp(-2, 2) + 2 if self.clip else _buckets(rel, self.bidirectional, 16, self.max_distance)
        return self.table(code).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, -1, self.d).transpose(1, 2) for p in (self.q, self.k, self.v))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias(t), scale=1.0)
        return self.o(o.transpose(1, 2).reshape(b, t, -1))


@pytest.mark.parametrize("bidirectional, max_distance", [(True, 20), (False, 40)])
def test_a_bucketed_offset_table_is_relative_bias(bidirectional, max_distance):
    torch.manual_seed(0)
    spec = assert_same_model(_BiasedAttention(bidirectional, max_distance), (rand(2, 7, 16, seed=3),))
    want = f"relative_bias(x, heads = 2, buckets = 16, max_distance = {max_distance}" + \
        ("" if bidirectional else ", bidirectional = false")
    assert want in spec.text and "attention(rank = 8, scale = 1.0, attn_mask = position_bias)" in spec.text


def test_a_table_of_clipped_offsets_is_refused_at_its_line():
    with pytest.raises(TorchImportError) as info:
        rpn2c.from_torch(_BiasedAttention(clip=True).double(), (rand(2, 7, 16, seed=3),))
    assert "indexed by no T5 bucket of the key − query offset" in str(info.value)
    assert info.value.library_file == __file__


class _QkNorm(nn.Module):
    """Qwen3's attention: an RMSNorm over each head's D features of the queries and keys (one weight each, shared
    by the heads) between the split into heads and the transpose; ``upcast``: LlamaRMSNorm's float32 form;
    ``only_q``: the keys left unnormalised (no qk_norm form)."""

    def __init__(self, upcast=False, only_q=False, e=16, heads=4):
        super().__init__()
        self.d, self.upcast, self.only_q = e // heads, upcast, only_q
        self.q, self.k, self.v, self.o = (nn.Linear(e, e, bias=False) for _ in range(4))
        self.q_norm, self.k_norm = nn.Parameter(torch.rand(self.d) + 0.5), nn.Parameter(torch.rand(self.d) + 0.5)

    def norm(self, x, w):
        h = x.to(torch.float32) if self.upcast else x
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        return w * h.to(x.dtype) if self.upcast else w * h

    def forward(self, x):
        b, t, _ = x.shape
        q = self.norm(self.q(x).view(b, t, -1, self.d), self.q_norm).transpose(1, 2)
        k = self.k(x).view(b, t, -1, self.d)
        k = (k if self.only_q else self.norm(k, self.k_norm)).transpose(1, 2)
        v = self.v(x).view(b, t, -1, self.d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(o.transpose(1, 2).reshape(b, t, -1))


def test_query_and_key_norms_per_head_are_qk_norm():
    torch.manual_seed(0)
    spec = assert_same_model(_QkNorm(), (rand(2, 5, 16, seed=3),))
    assert 'attention(rank = 4, causal = true, qk_norm = "rms", qk_norm_eps = 1e-05)' in spec.text
    assert spec.text.count("rms_norm") == 0
    # the float32 norms: exact in the default lowering (the reference's per-head float32 gradients round apart)
    spec = assert_same_model(_QkNorm(upcast=True), (rand(2, 5, 16, seed=3),), references=(False,))
    assert "qk_norm_eps = 1e-05, qk_norm_upcast = true" in spec.text


def test_a_norm_of_the_queries_alone_is_refused():
    with pytest.raises(TorchImportError) as info:
        rpn2c.from_torch(_QkNorm(only_q=True).double(), (rand(2, 5, 16, seed=3),))
    assert "only one of the query and the key" in str(info.value) and info.value.library_file == __file__
