"""Rotary positions inside the bilinear ξ and RMS normalisation, in float64 against hand-written torch: the rotation
as the libraries write it (``rotate_half``, GPT-J's interleaved pairs), the literal R_t of the oracle, the
relative-position property, both lowerings, packed heads with one SDPA call, and the parameter-free shape errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import rpn2c
from rpn2c.functional import rotary


def _hand_rotary(x, dims, base, interleaved):
    """The library form: Llama's ``q * cos + rotate_half(q) * sin`` (or GPT-J's ``rotate_every_two``) on the leading
    ``dims`` features, angles in float32."""
    n = x.shape[-2]
    inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=torch.int64).float() / dims))
    freqs = torch.outer(torch.arange(n).float(), inv_freq)
    part, rest = x[..., :dims], x[..., dims:]
    if interleaved:
        cos = freqs.cos().repeat_interleave(2, -1).to(x.dtype)
        sin = freqs.sin().repeat_interleave(2, -1).to(x.dtype)
        turned = torch.stack((-part[..., 1::2], part[..., 0::2]), -1).flatten(-2)
    else:
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        turned = torch.cat((-part[..., dims // 2:], part[..., :dims // 2]), -1)
    return torch.cat((part * cos + turned * sin, rest), -1)


@settings(deadline=None, max_examples=40)
@given(n=st.integers(1, 9), half=st.integers(1, 4), extra=st.integers(0, 3), interleaved=st.booleans(),
       base=st.sampled_from([10.0, 500.0, 10000.0]))
def test_rotate_is_the_library_form_and_the_literal_rotation(n, half, extra, interleaved, base):
    dims = 2 * half
    x = torch.randn(2, 3, n, dims + extra, dtype=torch.float64)
    got = rotary.rotate(x, dims, base, interleaved)
    torch.testing.assert_close(got, _hand_rotary(x, dims, base, interleaved), rtol=0, atol=1e-14)
    r = rotary.rotation_matrices(n, dims + extra, dims, base, interleaved, torch.float64)
    torch.testing.assert_close(torch.einsum("nij,...nj->...ni", r, x), got, rtol=0, atol=1e-14)
    eye = torch.eye(dims + extra, dtype=torch.float64).expand(n, -1, -1)
    torch.testing.assert_close(r @ r.transpose(-1, -2), eye, rtol=0, atol=1e-7)  # orthogonal, to float32 angles


def test_scores_depend_on_positions_only_through_their_difference():
    """⟨R_t q, R_s k⟩ = ⟨R_{t+u} q, R_{s+u} k⟩: the same pair of vectors at shifted positions scores the same."""
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    seq_q, seq_k = torch.zeros(12, 8, dtype=torch.float64), torch.zeros(12, 8, dtype=torch.float64)
    seq_q[:] = q
    seq_k[:] = k
    rq, rk = rotary.rotate(seq_q, 8, 100.0), rotary.rotate(seq_k, 8, 100.0)
    scores = rq @ rk.T
    for t, s, u in [(3, 1, 4), (5, 5, 6), (2, 7, 3)]:
        assert abs(scores[t, s] - scores[t + u, s + u]) < 1e-5  # float32 angles


SPEC = """model m {{
  input x: sequence[B, T, 24]
  y = head(x) {{
    heads = {heads}
    xi_instance = attention(rank = 6, causal = {causal}, bias = {bias}, rotary = {base}, rotary_dims = {dims},
                            rotary_interleaved = {inter})
    out = 6
    fusion = concat_linear(out = 24)
  }}
  return y
}}
"""


def _hand_attention(model, x, heads, dims, base, inter, causal):
    """Multi-head attention written out over [B, H, T, D] from the packed weights, rotary on q and k."""
    sd = {k.split(".", 1)[1]: v for k, v in model.state_dict().items()}
    w, b = sd["in_proj_weight"], sd.get("in_proj_bias")
    if b is not None and b.shape[0] < w.shape[0]:  # no ξ bias: in_proj_bias holds V's (the head's bias) only
        b = torch.cat((torch.zeros(w.shape[0] - b.shape[0], dtype=b.dtype), b))
    qkv = x @ w.T + (b if b is not None else 0)
    q, k, v = (t.unflatten(-1, (heads, 6)).transpose(1, 2) for t in qkv.split(heads * 6, -1))
    q, k = _hand_rotary(q, dims, base, inter), _hand_rotary(k, dims, base, inter)
    s = q @ k.transpose(-1, -2) / math.sqrt(6)
    if causal:
        s = s.masked_fill(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1), float("-inf"))
    o = (s.softmax(-1) @ v).transpose(1, 2).flatten(-2)
    return o @ sd["fusion.linear.weight"].T + sd["fusion.linear.bias"]


@settings(deadline=None, max_examples=12)
@given(heads=st.integers(1, 3), dims=st.sampled_from([2, 4, 6]), inter=st.booleans(), causal=st.booleans(),
       bias=st.booleans(), t=st.integers(1, 7))
def test_rotary_attention_equals_hand_written_torch_in_both_lowerings(heads, dims, inter, causal, bias, t):
    text = SPEC.format(heads=heads, causal=str(causal).lower(), bias=str(bias).lower(), base="10000.0", dims=dims,
                       inter=str(inter).lower())
    torch.manual_seed(0)
    default = rpn2c.compile(text).double()
    reference = rpn2c.compile(text, reference=True).double()
    reference.load_state_dict(default.state_dict())
    for p in default.parameters():  # non-zero biases, so a bias on the wrong side of the rotation shows
        torch.nn.init.normal_(p)
    reference.load_state_dict(default.state_dict())
    x = torch.randn(2, t, 24, dtype=torch.float64, requires_grad=True)
    want = _hand_attention(default, x, heads, dims, 10000.0, inter, causal)
    for model in (default, reference):
        got = model(x)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
        g_got, = torch.autograd.grad(got.sum(), x)
        g_want, = torch.autograd.grad(want.sum(), x, retain_graph=True)
        torch.testing.assert_close(g_got, g_want, rtol=0, atol=1e-10)


def test_rotary_runs_inside_the_one_sdpa_call_of_packed_heads():
    from rpn2c.runtime.explain import explain_text

    text = SPEC.format(heads=4, causal="true", bias="false", base="10000.0", dims=6, inter="false")
    from rpn2c.passes import optimize

    record = explain_text(optimize(rpn2c.check(text)), "text")
    assert "fused_sdpa" in record and "rotary" in record


@pytest.mark.parametrize("settings_, message", [
    ("rotary = 10000.0, rotary_dims = 3", "rotary_dims must be even and at most 6, got 3"),
    ("rotary = 10000.0, rotary_dims = 8", "rotary_dims must be even and at most 6, got 8"),
    ("rotary_dims = 4", "give rotary = θ"),
])
def test_bad_rotary_settings_are_located_errors(settings_, message):
    text = ("model m {\n  input x: sequence[B, T, 24]\n  y = head(x) {\n"
            f"    xi_instance = attention(rank = 6, {settings_})\n    out = 6\n  }}\n  return y\n}}\n")
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    d = info.value.diagnostics[0]
    assert message in d.message and d.span.line in (3, 4), d


@settings(deadline=None, max_examples=20)
@given(eps=st.sampled_from([1e-6, 1e-5, 0.1]), offset=st.sampled_from([0.0, 1.0]), t=st.integers(1, 5))
def test_rms_norm_is_the_llama_and_t5_form(eps, offset, t):
    """HF's LlamaRMSNorm / T5LayerNorm: ``w · x · rsqrt(mean(x²) + ε)``; Gemma's ``(1 + w)`` with ``offset``."""
    text = ("model m {\n  input x: sequence[B, T, 6]\n"
            f"  y = rms_norm(x, eps = {eps}, offset = {offset})\n  return y\n}}\n")
    model = rpn2c.compile(text).double()
    (w,) = model.parameters()
    torch.testing.assert_close(w, torch.full((6,), 1.0 - offset, dtype=torch.float64))
    torch.nn.init.normal_(w)
    x = torch.randn(3, t, 6, dtype=torch.float64)
    want = (w + offset) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    torch.testing.assert_close(model(x), want, rtol=0, atol=1e-13)
    assert rpn2c.check(text).node(rpn2c.check(text).outputs[0]).params == 6
