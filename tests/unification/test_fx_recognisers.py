"""The recognisers over traced graphs (rpn2c/frontends/fx_attention.py, fx_norms.py, fx_gelu.py): attention written
out as the libraries write it (q/k/v projections split into heads, rotary, repeat_kv, SDPA, merge, o_proj; GPT-2's
packed Conv1D), LlamaRMSNorm with its float32 upcast and GPT-2's tanh GELU each convert to the spec's form, equal in
float64 (outputs, input and parameter gradients, free parameters), and a near miss is refused at its line."""

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


def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


class _Rope(nn.Module):
    def __init__(self, dims, base):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.int64).float() / dims))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x):
        t = torch.arange(x.shape[1], device=x.device)
        freqs = (self.inv_freq.float()[:, None] @ t[None].float()).transpose(0, 1)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class _Attention(nn.Module):
    """Llama's attention as transformers writes it, with options for each recognised piece."""

    def __init__(self, e=16, heads=4, kv_heads=2, bias=False, causal=True, rotary=None, gqa="repeat", scale=None):
        super().__init__()
        self.h, self.g, self.d = heads, kv_heads, e // heads
        self.q_proj = nn.Linear(e, heads * self.d, bias=bias)
        self.k_proj = nn.Linear(e, kv_heads * self.d, bias=bias)
        self.v_proj = nn.Linear(e, kv_heads * self.d, bias=bias)
        self.o_proj = nn.Linear(heads * self.d, e, bias=bias)
        self.rope = _Rope(self.d, rotary) if rotary else None
        self.causal, self.gqa, self.scale = causal, gqa, scale

    def _repeat(self, x):
        b, g, t, d = x.shape
        n = self.h // g
        return x if n == 1 else x[:, :, None, :, :].expand(b, g, n, t, d).reshape(b, g * n, t, d)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.d).transpose(1, 2)
        if self.rope is not None:
            cos, sin = self.rope(x)
            cos, sin = cos.unsqueeze(0).unsqueeze(1), sin.unsqueeze(0).unsqueeze(1)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        if self.gqa == "repeat":
            k, v = self._repeat(k), self._repeat(v)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale,
                                           enable_gqa=self.gqa == "sdpa")
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class _Block(nn.Module):
    """A pre-norm residual block: LlamaRMSNorm written out (float32 upcast, cast back), attention, residual."""

    def __init__(self, attention, e=16, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(e) + 0.5)
        self.eps, self.attn = eps, attention

    def norm(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)

    def forward(self, x):
        return x + self.attn(self.norm(x))


class _PackedConv1D(nn.Module):
    """GPT-2's attention: one Conv1D-style packed projection (W stored [in, out]) split into q, k, v."""

    def __init__(self, e=12, heads=3):
        super().__init__()
        self.h, self.d = heads, e // heads
        self.c_attn_w, self.c_attn_b = nn.Parameter(torch.randn(e, 3 * e) * 0.3), nn.Parameter(torch.randn(3 * e))
        self.c_proj_w, self.c_proj_b = nn.Parameter(torch.randn(e, e) * 0.3), nn.Parameter(torch.randn(e))

    @staticmethod
    def _conv1d(x, w, b):
        return torch.addmm(b, x.view(-1, x.size(-1)), w).view(*x.shape[:-1], w.shape[1])

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self._conv1d(x, self.c_attn_w, self.c_attn_b).split(e, dim=2)
        q, k, v = (z.view(b, t, -1, self.d).transpose(1, 2) for z in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(self.d))
        return self._conv1d(o.transpose(1, 2).contiguous().reshape(b, t, e), self.c_proj_w, self.c_proj_b)


class _GeluNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)

    def forward(self, x):
        x = self.fc(x)
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class _PaddedAttention(_Attention):
    """Attention whose mask is built in forward from a padding mask [B, S] (1 = attend), as transformers'
    masking_utils does: cast to bool, combined with the causal mask, expanded to [B, 1, T, S]."""

    def __init__(self, causal, invert=False):
        super().__init__(kv_heads=4, causal=False)
        self.with_causal, self.invert = causal, invert

    def forward(self, x, attention_mask):
        b, t, _ = x.shape
        keep = attention_mask.to(torch.bool)
        keep = ~keep if self.invert else keep
        mask = keep[:, None, None, :].expand(b, 1, t, t)
        if self.with_causal:
            mask = mask & torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        q, k, v = (p(x).view(b, t, -1, self.d).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


def _padding():
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    return mask


@pytest.mark.parametrize("causal", [False, True])
def test_a_mask_built_from_padding_is_key_padding(causal):
    torch.manual_seed(0)
    module = _PaddedAttention(causal)
    x, mask = rand(2, 5, 16, seed=3), _padding()
    spec = assert_same_model(module, (x, mask))
    assert "input attention_mask: keep_mask[B, T]" in spec.text
    assert ("causal = true, key_padding = attention_mask" if causal else "(rank = 4, key_padding = attention_mask)") \
        in spec.text


class _Masked(_Attention):
    """A mask made from sizes in forward: causal (``tril``) converts as causal = true; anything else is refused."""

    def __init__(self, kv_heads, upper=True):
        super().__init__(kv_heads=kv_heads, causal=False)
        self.upper = upper

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, -1, self.d).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        ones = torch.ones(t, t, dtype=torch.bool)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=ones.triu() if self.upper else ones.tril())
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


def test_a_causal_mask_made_from_sizes_is_causal():
    torch.manual_seed(0)
    spec = assert_same_model(_Masked(4, upper=False), (rand(2, 5, 16, seed=3),))
    assert "attention(rank = 4, causal = true)" in spec.text


class _Eager(_Attention):
    """Attention written out with matmul, softmax and matmul (scaled by a 0-d tensor, as GPT-2's eager form), an
    additive causal mask made from sizes, dropout."""

    def __init__(self, divide=True):
        super().__init__(kv_heads=4, causal=False)
        self.divide = divide

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, -1, self.d).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        scores = q @ k.transpose(-2, -1)
        scores = scores / torch.full([], math.sqrt(self.d), dtype=x.dtype) if self.divide else scores * 0.3
        scores = scores + torch.full((t, t), float("-inf"), dtype=x.dtype).triu(1)
        weights = F.dropout(torch.softmax(scores, dim=-1), p=0.1, training=self.training)
        return self.o_proj((weights @ v).transpose(1, 2).reshape(b, t, -1))


def test_eager_attention_converts_with_its_scale():
    torch.manual_seed(0)
    spec = assert_same_model(_Eager(), (rand(2, 5, 16, seed=3),))
    assert "attention(rank = 4, causal = true)" in spec.text and spec.text.count("= head(") == 1
    spec = assert_same_model(_Eager(divide=False), (rand(2, 5, 16, seed=3),))  # a scale other than 1/√D
    assert "attention(rank = 4, causal = true, scale = 0.3)" in spec.text


def _spec_text(module, x):
    return rpn2c.from_torch(module.double().eval(), (x,)).text


CASES = {
    "grouped_repeat_kv_rotary": lambda: _Block(_Attention(rotary=10000.0)),
    "grouped_sdpa_gqa": lambda: _Attention(gqa="sdpa", causal=False),
    "biased_full_heads": lambda: _Attention(heads=4, kv_heads=4, bias=True, causal=False, scale=0.5),
    "packed_conv1d": lambda: _PackedConv1D(),
    "gelu_tanh_written_out": lambda: _GeluNew(),
}


@pytest.mark.parametrize("name", list(CASES))
def test_written_out_forms_convert_equal(name):
    torch.manual_seed(0)
    module = CASES[name]()
    x = rand(2, 5, {"gelu_tanh_written_out": 6, "packed_conv1d": 12}.get(name, 16), seed=3)
    assert_same_model(module, (x,))


def test_recognised_forms_read_as_the_spec_forms():
    """The forms the recognisers emit: one attention head with its heads, grouping, causality and rotary base, and
    rms_norm with the upcast; no projection or norm step is left as its own statement."""
    torch.manual_seed(0)
    text = _spec_text(_Block(_Attention(rotary=500.0)), rand(2, 5, 16, seed=3))
    assert "rms_norm(x, eps = 1e-06, upcast = true)" in text
    assert "heads = 4" in text and "kv_heads = 2" in text
    assert "xi_instance = attention(rank = 4, causal = true, rotary = 500.0)" in text
    assert "fusion = concat_linear(out = 16, bias = false)" in text
    assert text.count("= head(") == 1 and "q_proj" not in text.split("model ")[1].split("{")[0]
    gelu = _spec_text(_GeluNew(), rand(2, 5, 6, seed=3))
    assert 'gelu(approximate = "tanh")' in gelu and "tanh]" not in gelu


def test_upcast_rms_norm_is_float32_arithmetic():
    """With the upcast a float64 input is normalised in float32 (it differs from the float64 norm by float32's
    rounding), then scaled in float64: LlamaRMSNorm's values, bit for bit."""
    from rpn2c.components.impl.processing import RMSNormModule

    x = rand(3, 4, 16, seed=5) * 3
    up = RMSNormModule((16,), 1e-6, True, 0.0, upcast=True).double()
    plain = RMSNormModule((16,), 1e-6, True, 0.0).double()
    with torch.no_grad():
        up.weight.uniform_(0.5, 1.5)
        plain.weight.copy_(up.weight)
    h = x.float()
    want = up.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).double()
    assert torch.equal(up(x), want)
    assert 1e-12 < (up(x) - plain(x)).abs().max() < 1e-5


class _T5NormLeak(nn.Module):
    """T5LayerNorm's form whose float32 copy of the input is also read outside the mean square: no rms_norm."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8))

    def forward(self, x):
        h = x.to(torch.float32)
        return self.weight * (x * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)) + h.to(x.dtype)


def test_near_misses_are_refused_at_their_line_naming_the_pattern():
    with pytest.raises(TorchImportError) as info:
        rpn2c.from_torch(_T5NormLeak().double(), (rand(2, 3, 8, seed=1),))
    err = info.value
    assert err.library_file == __file__ and err.library_line == _T5NormLeak.forward.__code__.co_firstlineno + 1
    assert "RMSNorm recogniser" in str(err) and "read outside the mean square" in str(err)

    with pytest.raises(TorchImportError) as info:  # a mask made from sizes that is not causal
        rpn2c.from_torch(_Masked(kv_heads=4).double(), (rand(2, 5, 16, seed=3),))
    assert "attention recogniser did not map" in str(info.value) and "is not causal" in str(info.value)
    assert info.value.library_file == __file__

    with pytest.raises(TorchImportError) as info:  # 1 = blocked: not the padding the probes read
        rpn2c.from_torch(_PaddedAttention(True, invert=True).double(), (rand(2, 5, 16, seed=3), _padding()))
    assert "neither its key padding nor the key padding with the causal mask" in str(info.value)
