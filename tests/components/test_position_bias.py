"""Relative position biases (``relative_bias``: T5's bucketed learned bias; ``alibi``) as additive terms of the
attention ξ's scores, in float64 against hand-written torch: T5's ``_relative_position_bucket`` written out, ALiBi's
slopes from the paper, and multi-head attention adding head h's slice (with causal and padding masks) in the
default lowering (one SDPA call, the bias its attn_mask), its per-head form and the reference lowering — outputs,
input gradients and the bias table's gradient; a bias for another number of heads is a located error."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.errors import SpecError
from rpn2c.functional import position_bias
from rpn2c.lower.build import CompiledModel
from rpn2c.passes import optimize

D, RANK, OUT = 6, 3, 2


# ------------------------------------------------------------------------------------------------ hand-written
def _t5_bucket(rel: int, bidirectional: bool, buckets: int, max_distance: int) -> int:
    """Mesh TensorFlow's / T5's bucket of one offset j − i, in plain Python (float32 logarithm as there)."""
    out = 0
    if bidirectional:
        buckets //= 2
        out += buckets if rel > 0 else 0
        n = abs(rel)
    else:
        n = max(-rel, 0)
    exact = buckets // 2
    if n < exact:
        return out + n
    ratio = torch.tensor(n / exact, dtype=torch.float32).log() / math.log(max_distance / exact)
    return out + min(exact + int(ratio * (buckets - exact)), buckets - 1)


def _alibi_slopes(h: int) -> list[float]:
    """The paper's slopes: 2^(−8i/H), i = 1..H, for H a power of two; else those of the power of two below H and
    the odd-numbered ones of twice that power."""
    def closed(n):
        return [2 ** (-8 * i / n) for i in range(1, n + 1)]

    p = 2 ** int(math.floor(math.log2(h)))
    return closed(p) + closed(2 * p)[0::2][:h - p] if p != h else closed(h)


def _hand_attention(model, x, pad, bias, causal, scale):
    """Multi-head attention written out from the model's packed tensors: head h's scores + bias[h] + masks."""
    sd = dict(model.named_parameters())
    w, heads, t = sd["y.in_proj_weight"], bias.shape[0], x.shape[1]
    q, k, v = (x @ part.T for part in w.split([heads * RANK, heads * RANK, heads * OUT]))
    outs = []
    for h in range(heads):
        qh, kh, vh = q[..., h * RANK:(h + 1) * RANK], k[..., h * RANK:(h + 1) * RANK], v[..., h * OUT:(h + 1) * OUT]
        s = qh @ kh.transpose(-1, -2) * scale + bias[h]
        if causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        if pad is not None:
            s = s.masked_fill(~pad[:, None, :], float("-inf"))
        outs.append(torch.softmax(s, -1) @ vh)
    return torch.cat(outs, -1) @ sd["y.fusion.linear.weight"].T + sd["y.fusion.linear.bias"]


def _spec(op: str, heads: int, causal: bool, padding: bool, scale: float | None) -> str:
    xi = [f"rank = {RANK}", "attn_mask = b"] + (["causal = true"] if causal else []) + \
        (["key_padding = k"] if padding else []) + ([f"scale = {scale}"] if scale is not None else [])
    return "\n".join([
        "model m {", f"  input x: sequence[B, T, {D}]", *(["  input k: keep_mask[B, T]"] if padding else []),
        f"  b = {op}", "  y = head(x) {", f"    heads = {heads}", f"    xi_instance = attention({', '.join(xi)})",
        f"    out = {OUT}", "    bias = false", f"    fusion = concat_linear(out = {D})", "  }", "  return y", "}"])


def _build(text, reference=False, disable=()):
    return CompiledModel(optimize(rpn2c.check(text), disable=disable), reference=reference).double()


# ------------------------------------------------------------------------------------------------ the functions
@settings(deadline=None, max_examples=40)
@given(nq=st.integers(1, 40), nk=st.integers(1, 40), bidirectional=st.booleans(),
       buckets=st.integers(4, 40), extra=st.integers(1, 150))
def test_buckets_are_t5s(nq, nk, bidirectional, buckets, extra):
    half = buckets // 2 if bidirectional else buckets
    max_distance = half // 2 + extra
    got = position_bias.t5_buckets(position_bias.offsets(nq, nk), bidirectional, buckets, max_distance)
    want = [[_t5_bucket(j - i, bidirectional, buckets, max_distance) for j in range(nk)] for i in range(nq)]
    assert got.tolist() == want
    assert int(got.min()) >= 0 and int(got.max()) < buckets


def test_buckets_equal_transformers_where_installed():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = position_bias.offsets(50, 60)
    for bidirectional, buckets, max_distance in ((True, 32, 128), (False, 32, 128), (True, 8, 16), (False, 6, 5)):
        want = t5.T5Attention._relative_position_bucket(rel, bidirectional, buckets, max_distance)
        assert torch.equal(position_bias.t5_buckets(rel, bidirectional, buckets, max_distance), want)


@given(heads=st.integers(1, 40))
def test_alibi_slopes_are_the_papers(heads):
    assert position_bias.alibi_slopes(heads) == pytest.approx(_alibi_slopes(heads), rel=1e-15)
    bias = position_bias.alibi_bias(heads, 5, 7, torch.float64)
    i, j = torch.arange(5)[:, None], torch.arange(7)[None]
    for h, m in enumerate(_alibi_slopes(heads)):
        assert_close(bias[h], -m * (i - j).abs().double(), rtol=0, atol=1e-15)


# ------------------------------------------------------------------------------------------------ inside attention
@settings(deadline=None, max_examples=8)
@given(heads=st.integers(1, 5), t=st.integers(1, 9), causal=st.booleans(), padding=st.booleans(),
       alibi=st.booleans(), bidirectional=st.booleans(), scale=st.sampled_from([None, 1.0]),
       form=st.sampled_from(["default", "per_head", "reference"]))
def test_attention_adds_each_heads_slice(heads, t, causal, padding, alibi, bidirectional, scale, form):
    buckets, max_distance = 8, 6
    op = (f"alibi(x, heads = {heads})" if alibi else
          f"relative_bias(x, heads = {heads}, buckets = {buckets}, max_distance = {max_distance}, "
          f"bidirectional = {'true' if bidirectional else 'false'})")
    text = _spec(op, heads, causal, padding, scale)
    torch.manual_seed(heads * 31 + t)
    model = _build(text, reference=form == "reference", disable={"fused_heads"} if form == "per_head" else ())
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.7)
    x = torch.randn(2, t, D, dtype=torch.float64, requires_grad=True)
    pad = None
    if padding:
        pad = torch.ones(2, t, dtype=torch.bool)
        pad[1, t // 2 + 1:] = False  # the first key stays: no query loses every key
    args = (x, pad) if padding else (x,)
    got = model(*args)
    if alibi:
        bias = torch.tensor(_alibi_slopes(heads), dtype=torch.float64)[:, None, None] * \
            -(torch.arange(t)[:, None] - torch.arange(t)[None]).abs().double()
    else:
        table = model.b.weight
        idx = [[_t5_bucket(j - i, bidirectional, buckets, max_distance) for j in range(t)] for i in range(t)]
        bias = table[torch.tensor(idx)].permute(2, 0, 1)
    want = _hand_attention(model, x, pad, bias, causal, scale if scale is not None else 1 / math.sqrt(RANK))
    assert_close(got, want, rtol=0, atol=1e-12)
    w = torch.randn_like(got)
    grads = torch.autograd.grad((got * w).sum(), [x] + list(model.parameters()))
    want_grads = torch.autograd.grad((want * w).sum(), [x] + list(model.parameters()), allow_unused=True)
    for g, h in zip(grads, want_grads):
        assert_close(g, h if h is not None else torch.zeros_like(g), rtol=0, atol=1e-11)


def test_default_lowering_runs_one_sdpa_call_with_the_whole_bias_as_its_mask(monkeypatch):
    masks = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        masks.append(kwargs.get("attn_mask"))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    text = _spec("relative_bias(x, heads = 4, buckets = 8, max_distance = 6)", 4, False, True, 1.0)
    model = _build(text).eval()
    pad = torch.ones(2, 5, dtype=torch.bool)
    pad[0, 3:] = False
    with torch.no_grad():
        model(torch.randn(2, 5, D, dtype=torch.float64), pad)
    assert len(masks) == 1 and tuple(masks[0].shape) == (2, 4, 5, 5)
    bias = position_bias.bucketed_bias(model.b.weight, 5, 5, True, 6)
    assert torch.isneginf(masks[0][0, :, :, 3:]).all() and torch.equal(masks[0][1], bias)


def test_a_bias_for_another_number_of_heads_or_other_items_is_a_located_error():
    with pytest.raises(SpecError) as err:
        rpn2c.check(_spec("alibi(x, heads = 2)", 4, False, False, None))
    assert err.value.diagnostics[0].code == "E0349" and err.value.diagnostics[0].span.line == 6
    cross = _spec("alibi(x, heads = 2)", 2, False, False, None).replace(
        "  input x: sequence[B, T, 6]", "  input x: sequence[B, T, 6]\n  input c: sequence[B, S, 6]").replace(
        "head(x)", "head(x, context = c)")
    with pytest.raises(SpecError, match="made for T keys, but the attention has S"):
        rpn2c.check(cross)
    with pytest.raises(SpecError, match="give it as attn_mask"):
        rpn2c.check(_spec("alibi(x, heads = 2)", 2, False, False, None).replace("attn_mask = b", "key_padding = b"))
    with pytest.raises(SpecError, match="max_distance must be larger"):
        rpn2c.check(_spec("relative_bias(x, heads = 2, buckets = 8, max_distance = 2)", 2, False, False, None))


def test_the_bias_is_one_value_read_by_every_layer():
    """T5's layers reuse the first layer's position_bias: one table, its parameters counted once."""
    one = rpn2c.check(_spec("relative_bias(x, heads = 2, buckets = 8)", 2, False, False, None))
    assert one.node("b").type.role == "head_bias" and str(one.node("b").type) == "head_bias[2, T, T]"
    model = _build(_spec("relative_bias(x, heads = 2, buckets = 8)", 2, False, False, None))
    assert model.b.weight.shape == (8, 2)
