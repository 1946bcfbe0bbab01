"""from_torch on nn.MultiheadAttention and nn.TransformerEncoderLayer.

RPN 2 recipe checked here (catalog §5.4; multi-head is unspecified in the paper, §8 item 15): ``heads = H`` copies of
one head fused by ``concat_linear`` (= out_proj); head h has a low-rank bilinear instance ξ
softmax((q W_q,h + b_q,h)(k W_k,h + b_k,h)ᵀ/√d_head) with keys from ``key`` and the values as its data (context),
κ identity, ψ = W_v,h and the bias b_v,h. The encoder layer adds the identity remainder (residual) and LayerNorm as
output (post-norm) or input (pre-norm) processing.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from unification_helpers import assert_matches_torch, compile_or_skip, n_examples, rand

import rpn2c


def _mask(shape, seed, kind):
    """A random mask of ``kind`` (bool: True = blocked; float: added) that never blocks key 0."""
    g = torch.Generator().manual_seed(seed)
    if kind == "bool":
        blocked = torch.rand(shape, generator=g) < 0.4
        blocked[..., 0] = False
        return blocked
    return torch.randn(shape, generator=g, dtype=torch.float64)


def _seq(batch_first, b, t, f, seed):
    x = rand(b, t, f, seed=seed)
    return x if batch_first else x.transpose(0, 1).contiguous()


@st.composite
def mha_cases(draw):
    h, r = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    e = h * r
    bf, bias = draw(st.booleans()), draw(st.booleans())
    kdim, vdim = draw(st.sampled_from([None, 2, 5])), draw(st.sampled_from([None, 1, 4]))
    b, t, s = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(e, h, bias=bias, kdim=kdim, vdim=vdim, batch_first=bf,
                              dropout=draw(st.sampled_from([0.0, 0.2]))).double()
    if bias:
        with torch.no_grad():
            m.in_proj_bias.normal_()
    q = _seq(bf, b, t, e, seed + 1)
    self_attn = kdim is None and vdim is None and draw(st.booleans())
    if self_attn:
        k = v = q
        s = t
    else:
        k, v = _seq(bf, b, s, kdim or e, seed + 2), _seq(bf, b, s, vdim or e, seed + 3)
    kw = {"need_weights": draw(st.booleans())}
    kind = draw(st.sampled_from(["bool", "float"]))
    if draw(st.booleans()):
        kw["key_padding_mask"] = _mask((b, s), seed + 4, kind)
    mask_rank = draw(st.sampled_from([0, 2] + ([3] if h == 1 else [])))
    if mask_rank:
        kw["attn_mask"] = _mask((t, s) if mask_rank == 2 else (b, t, s), seed + 5, kind)
    return m, (q, k, v), kw


@settings(max_examples=n_examples(40), deadline=None)
@given(mha_cases())
def test_multihead_attention_matches_torch(case):
    """nn.MultiheadAttention (batch_first both, bias on/off, kdim/vdim, bool/float key-padding and 2-D/3-D
    attention masks): attn_output and parameter gradients equal torch's, in both lowerings."""
    m, args, kw = case
    assert_matches_torch(m, args, kw)


@st.composite
def encoder_cases(draw):
    h, r = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    e = h * r
    bf, norm_first = draw(st.booleans()), draw(st.booleans())
    b, t = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    torch.manual_seed(seed)
    m = nn.TransformerEncoderLayer(e, h, dim_feedforward=draw(st.integers(1, 6)),
                                   dropout=draw(st.sampled_from([0.0, 0.1])),
                                   activation=draw(st.sampled_from(["relu", "gelu"])),
                                   layer_norm_eps=draw(st.sampled_from([1e-5, 1e-3])), batch_first=bf,
                                   norm_first=norm_first).double()
    with torch.no_grad():
        for ln in (m.norm1, m.norm2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.normal_()
    kw = {}
    kind = draw(st.sampled_from(["bool", "float"]))
    if draw(st.booleans()):
        kw["src_mask"] = _mask((t, t), seed + 1, kind)
    if draw(st.booleans()):
        kw["src_key_padding_mask"] = _mask((b, t), seed + 2, kind)
    return m, (_seq(bf, b, t, e, seed + 3),), kw


@settings(max_examples=n_examples(30), deadline=None)
@given(encoder_cases())
def test_transformer_encoder_layer_matches_torch(case):
    """nn.TransformerEncoderLayer (post-/pre-norm, relu/gelu, batch_first both, masks): equal outputs and grads."""
    m, args, kw = case
    assert_matches_torch(m, args, kw)


@settings(max_examples=n_examples(10), deadline=None)
@given(st.integers(2, 6), st.integers(1, 2), st.booleans(), st.integers(0, 2**16), st.data())
def test_causal_attention_output_ignores_the_future(t, h, encoder, seed, data):
    """With a causal mask (is_causal=True), the compiled output at step i does not depend on inputs after i."""
    torch.manual_seed(seed)
    e = 4 * h
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    x = rand(2, t, e, seed=seed)
    if encoder:
        m = nn.TransformerEncoderLayer(e, h, 5, dropout=0.0, batch_first=True).double().eval()
        args, kw = (x,), {"src_mask": mask, "is_causal": True}
    else:
        m = nn.MultiheadAttention(e, h, batch_first=True).double().eval()
        args, kw = (x, x, x), {"attn_mask": mask, "is_causal": True}
    spec = rpn2c.from_torch(m, args, kw)
    # torch reads is_causal as a hint: the encoder layer (need_weights=False, no padding mask) runs SDPA's causal
    # mask instead of attn_mask; MultiheadAttention returning weights applies attn_mask and ignores the hint
    code = "\n".join(line for line in spec.text.splitlines() if not line.lstrip().startswith("#"))
    assert ("causal = true" in code) == encoder
    assert ("attn_mask = " in code) != encoder
    i = data.draw(st.integers(0, t - 2))
    x2 = x.clone()
    x2[:, i + 1:] += rand(2, t - i - 1, e, seed=seed + 1)
    for reference in (False, True):
        model = compile_or_skip(spec, reference)
        y1, y2 = ((model(z, mask) if encoder else model(z, z, z, mask)) for z in (x, x2))
        torch.testing.assert_close(y1[:, :i + 1], y2[:, :i + 1])
        assert not torch.allclose(y1[:, i + 1:], y2[:, i + 1:])
        want = m(x, **kw) if encoder else m(x, x, x, **kw)[0]
        torch.testing.assert_close(y1, want.detach())


def test_attention_spec_names_each_slot():
    m = nn.MultiheadAttention(6, 3, kdim=4, vdim=2, batch_first=True).double()
    spec = rpn2c.from_torch(m, (rand(1, 3, 6), rand(1, 2, 4), rand(1, 2, 2)))
    assert "head(query, context = value)" in spec.text
    assert "xi_instance = attention(rank = 2, bias = true, keys = key)" in spec.text
    assert "fusion = concat_linear(out = 6)" in spec.text and "heads = 3" in spec.text
    # identical heads keep torch's packing: kdim/vdim differ, so q, k and v are three tensors, mapped whole
    model = rpn2c.compile(spec.text)
    assert {k for k in model.state_dict() if "proj" in k} == {
        "attn.q_proj_weight", "attn.k_proj_weight", "attn.v_proj_weight", "attn.in_proj_bias"}
    assert spec.links["attn.q_proj_weight"].rows is None and not spec.links["attn.q_proj_weight"].transpose
    assert tuple(model.attn.k_proj_weight.shape) == (6, 4) and tuple(model.attn.v_proj_weight.shape) == (6, 2)


def test_time_first_encoder_after_order_agnostic_layers():
    """Linear/ReLU leave the axis order open; the time-first encoder layer after them fixes the input as
    time_major[T, B, F] and the model returns time-first, as the torch Sequential does."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0),
                      nn.Linear(4, 2))
    spec = assert_matches_torch(m, (rand(5, 2, 3),))
    assert "input x: time_major[T, B, 3]" in spec.text and "= time_major(" in spec.text
