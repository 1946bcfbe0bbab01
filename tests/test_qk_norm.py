"""Query/key norms (``attention(qk_norm = "rms")``, Qwen3's q_norm and k_norm): each head's queries and keys are
normalised over their r features, ``t/√(mean(t²) + ε)·γ``, after the projection and before the rotation, with one
γ_q and one γ_k [r] shared by the layer's identical heads. Both lowerings equal a hand-written torch attention in
float64 (outputs, input and parameter gradients), the per-head forms read the shared weights, the weights are
counted once, and a spec without the option keeps its hash."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rpn2c
from tests.test_grouped_query_attention import _build, _repeat_kv, _rope, assert_hand_written

D = 6  # model width


def _spec(heads, kv, rank, causal, rotary, eps=None, norm="rms"):
    xi = [f"rank = {rank}", f'qk_norm = "{norm}"'] + (["causal = true"] if causal else [])
    xi += ([f"rotary = {rotary}"] if rotary else []) + ([f"qk_norm_eps = {eps}"] if eps is not None else [])
    body = [f"heads = {heads}", *([f"kv_heads = {kv}"] if kv is not None else []),
            f"xi_instance = attention({', '.join(xi)})", f"out = {rank}", f"fusion = concat_linear(out = {D})",
            "bias = false"]
    return "\n".join([f"model m {{", f"  input x: sequence[B, T, {D}]", "  y0 = head(x) {",
                      *(f"    {b}" for b in body), "  }", "  return y0", "}"])


def _rms(t, gamma, eps):
    return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps) * gamma


def _hand_written(p, x, heads, kv, rank, causal, rotary, eps):
    """q/k/v projections, RMSNorm of each head's q and k by the shared γ, rotary, repeat_kv, softmax attention, W_o."""
    b, t, _ = x.shape
    wq, wk, wv = p["in_proj_weight"].split([heads * rank, kv * rank, kv * rank])
    q = (x @ wq.T).view(b, t, heads, rank).transpose(1, 2)
    k = (x @ wk.T).view(b, t, kv, rank).transpose(1, 2)
    v = (x @ wv.T).view(b, t, kv, rank).transpose(1, 2)
    q, k = _rms(q, p["q_norm_weight"], eps), _rms(k, p["k_norm_weight"], eps)
    if rotary:
        q, k = _rope(q, rotary), _rope(k, rotary)
    k, v = _repeat_kv(k, heads // kv), _repeat_kv(v, heads // kv)
    scores = q @ k.transpose(-1, -2) / math.sqrt(rank)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, heads * rank)
    return y @ p["fusion.linear.weight"].T + p["fusion.linear.bias"]


def _fresh(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # norm weights away from 1, so a misplaced one shows
            p.copy_(torch.rand(p.shape, generator=g, dtype=p.dtype) + 0.5 if "norm" in name else
                    torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)


@settings(deadline=None, max_examples=15)
@given(shape=st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 2), (6, 3)]), rank=st.sampled_from([2, 4]),
       causal=st.booleans(), rotary=st.sampled_from([None, 10000.0, 50.0]), eps=st.sampled_from([None, 0.01]))
def test_both_lowerings_equal_hand_written_normalised_attention(shape, rank, causal, rotary, eps):
    heads, kv = shape
    text = _spec(heads, kv, rank, causal, rotary, eps)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(heads), dtype=torch.float64)
    fused = _build(text)
    assert fused.y0._fused_attention, text
    _fresh(fused, heads * 10 + kv)
    for model in (fused, _build(text, reference=True), _build(text, disable={"fused_heads"})):
        model.load_state_dict(fused.state_dict())
        assert_hand_written(model, x, None, lambda p, xr: _hand_written(p, xr, heads, kv, rank, causal, rotary,
                                                                         1e-6 if eps is None else eps))


def test_the_heads_share_one_query_and_one_key_norm_weight():
    """Counted once (checker, both lowerings); the per-head forms' ξ all read the layer's two tensors."""
    heads, kv, rank = 4, 2, 2
    graph = rpn2c.check(_spec(heads, kv, rank, True, None))
    plain = rpn2c.check(_spec(heads, kv, rank, True, None, norm="none"))
    assert graph.param_count == plain.param_count + 2 * rank
    for reference in (False, True):
        model = _build(_spec(heads, kv, rank, True, None), reference=reference)
        sd = model.state_dict()
        assert sum(t.numel() for t in sd.values()) == graph.param_count
        assert sd["y0.q_norm_weight"].shape == sd["y0.k_norm_weight"].shape == (rank,)
    alone = _build(_spec(heads, kv, rank, True, None), disable={"fused_heads"})
    alone.y0.bind_views()
    ptrs = {h.xi_instance.q_norm_weight.data_ptr() for h in alone.y0.heads.values()}
    assert ptrs == {alone.y0.q_norm_weight.data_ptr()}


def test_a_single_head_owns_its_norm_weights():
    model = _build(_spec(1, None, 4, False, 10000.0))
    assert {k for k in model.state_dict() if "norm" in k} == {"y0.q_norm_weight", "y0.k_norm_weight"}


def test_a_spec_without_qk_norm_keeps_its_hash():
    """The option joins the canonical form only when given: older specs keep their hashes and checkpoints."""
    without = _spec(2, None, 2, True, None).replace(', qk_norm = "rms"', "")
    assert rpn2c.check(without).content_hash() == rpn2c.check(_spec(2, None, 2, True, None, norm="none")
                                                              ).content_hash()
    assert "qk_norm" not in str(rpn2c.check(without).canonical())
    assert rpn2c.check(_spec(2, None, 2, True, None)).content_hash() != rpn2c.check(without).content_hash()


def test_a_full_bilinear_xi_normalises_its_queries_and_unprojected_keys():
    """``bilinear`` has no W_k: γ_k is as wide as the keys' features; counted once over three packed heads, and
    the two lowerings agree."""
    text = _spec(3, None, 2, True, None).replace('attention(rank = 2, qk_norm = "rms"',
                                                 'bilinear(qk_norm = "rms"').replace("out = 2", "out = 3")
    graph = rpn2c.check(text)
    fused, reference = _build(text), _build(text, reference=True)
    _fresh(fused, 5)
    reference.load_state_dict(fused.state_dict())
    assert sum(p.numel() for p in fused.parameters()) == graph.param_count == 3 * (D * D + 3 * D) + 2 * D + 9 * D + D
    assert fused.y0.k_norm_weight.shape == (D,)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    torch.testing.assert_close(fused(x=x), reference(x=x), rtol=0, atol=1e-12)
