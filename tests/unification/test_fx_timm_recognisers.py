"""The recognisers for forms timm writes out (rpn2c/frontends/fx_timm.py), on small hand-written modules in timm's
forms (no timm needed): a BatchNorm subclass calling ``F.batch_norm`` on its own buffers then an activation
(``BatchNormAct2d``), fused-qkv attention (``qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)``,
SDPA, identity q/k norms) and MLP-Mixer's token mixing (a Linear across the items of the transposed sequence). Each
converts equal in float64 (outputs, input and parameter gradients, free parameters, both lowerings) to the spec form
named in its pattern, and a near miss is refused at its line naming the recogniser."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import rand

import rpn2c
from rpn2c.frontends import TorchImportError


class _BatchNormAct(nn.BatchNorm2d):
    """timm's BatchNormAct2d: F.batch_norm on the module's own running statistics, then an activation module."""

    def __init__(self, c, split=False):
        super().__init__(c, eps=1e-3)
        self.act, self.split = nn.SiLU(), split
        self.other = nn.BatchNorm2d(c) if split else None

    def forward(self, x):
        stats = self.other if self.split else self
        x = F.batch_norm(x, stats.running_mean, self.running_var, self.weight, self.bias,
                         self.training, self.momentum, self.eps)
        return self.act(x)


class _ConvBnAct(nn.Module):
    def __init__(self, split=False):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1, bias=False), _BatchNormAct(4, split)
        with torch.no_grad():  # statistics and affine away from 0 and 1
            for t in (self.bn.running_mean, self.bn.bias):
                t.normal_(0, 0.5)
            for t in (self.bn.running_var, self.bn.weight):
                t.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.conv(x)
        return y + self.bn(y)


class _FusedAttention(nn.Module):
    """timm's Attention (fused_attn): one qkv Linear, reshape to 5-D, permute, unbind, SDPA, merge, proj."""

    def __init__(self, dim=12, heads=3, order=(2, 0, 3, 1, 4), qkv_bias=True):
        super().__init__()
        self.h, self.d, self.order = heads, dim // heads, order
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=qkv_bias), nn.Linear(dim, dim)
        self.q_norm, self.k_norm, self.norm = nn.Identity(), nn.Identity(), nn.Identity()

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.h, self.d).permute(*self.order).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
        return self.proj(self.norm(x.transpose(1, 2).reshape(b, n, c)))


class _Mlp(nn.Module):
    def __init__(self, n, hidden, norm=False):
        super().__init__()
        self.fc1, self.act, self.drop = nn.Linear(n, hidden), nn.GELU(), nn.Dropout(0.1)
        self.norm = nn.LayerNorm(hidden) if norm else nn.Identity()
        self.fc2 = nn.Linear(hidden, n)

    def forward(self, x):
        return self.fc2(self.norm(self.drop(self.act(self.fc1(x)))))


class _TokenMixing(nn.Module):
    """MLP-Mixer's token mixing: x + mlp_tokens(norm(x).transpose(1, 2)).transpose(1, 2) over T = 5 items."""

    def __init__(self, norm=False, bias=True):
        super().__init__()
        self.norm1, self.mlp_tokens = nn.LayerNorm(6), _Mlp(5, 3, norm)
        if not bias:
            self.mlp_tokens.fc1 = nn.Linear(5, 3, bias=False)

    def forward(self, x):
        return x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)


def _text(module, x) -> str:
    return rpn2c.from_torch(module.double().eval(), (x,)).text


def test_functional_batch_norm_on_a_modules_own_buffers_is_its_batch_norm():
    torch.manual_seed(0)
    x = rand(2, 3, 5, 5, seed=1)
    spec = assert_same_model(_ConvBnAct(), (x,))
    assert "batch_norm(eps = 0.001)" in spec.text and "silu" in spec.text
    assert set(spec.links[k].source for k in spec.links if ".bn." in k) >= {"bn.running_mean", "bn.running_var",
                                                                            "bn.weight", "bn.bias"}


@pytest.mark.parametrize("dim, heads, qkv_bias", [(12, 3, True), (8, 1, True), (8, 2, False)])
def test_fused_qkv_attention_is_one_attention_head_with_the_packed_weight(dim, heads, qkv_bias):
    torch.manual_seed(0)
    spec = assert_same_model(_FusedAttention(dim, heads, qkv_bias=qkv_bias), (rand(2, 5, dim, seed=3),))
    assert spec.text.count("= head(") == 1 and (f"heads = {heads}" in spec.text) == (heads > 1)
    assert f"xi_instance = attention(rank = {dim // heads}{', bias = true' if qkv_bias else ''})" in spec.text
    assert {link.source for link in spec.links.values()} == {"qkv.weight", "proj.weight", "proj.bias"} | \
        ({"qkv.bias"} if qkv_bias else set())


@pytest.mark.parametrize("bias", [True, False])
def test_token_mixing_is_an_affine_instance_xi_per_linear(bias):
    torch.manual_seed(0)
    spec = assert_same_model(_TokenMixing(bias=bias), (rand(2, 5, 6, seed=4),))
    assert spec.text.count(f"xi_instance = parameterized(out = 3, bias = {str(bias).lower()})") == 1
    assert spec.text.count("xi_instance = parameterized(out = 5, bias = true)") == 1
    assert spec.text.count("psi = eye") == 2


@pytest.mark.parametrize("module, x, recogniser, why", [
    (lambda: _ConvBnAct(split=True), rand(2, 3, 5, 5, seed=1), "batch norm", "different modules"),
    (lambda: _FusedAttention(order=(2, 0, 1, 3, 4)), rand(2, 5, 12, seed=3), "attention", "not a projection"),
    (lambda: _TokenMixing(norm=True), rand(2, 5, 6, seed=4), "token mixing", "mixes entries"),
], ids=["stats_of_another_module", "qkv_permuted_otherwise", "layer_norm_inside_token_mixing"])
def test_near_misses_are_refused_at_their_line_naming_the_recogniser(module, x, recogniser, why):
    torch.manual_seed(0)
    with pytest.raises(TorchImportError) as info:
        _text(module(), x)
    err = str(info.value)
    assert f"the {recogniser} recogniser did not map" in err and why in err, err
    assert info.value.library_file == __file__
