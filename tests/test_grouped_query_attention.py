"""Grouped-query and multi-query attention (``kv_heads = G`` beside ``heads = H``): query head h reads the key
projection W_k and the value projection ψ (and their biases) of its group h // (H/G), as transformers'
``repeat_kv``. Both lowerings equal a hand-written torch attention in float64 (outputs, input and parameter
gradients), the parameters are counted once per group, the default lowering computes k and v once per group in
its one GEMM and runs one SDPA call, and a ``kv_heads`` that cannot apply is a located error."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c
from rpn2c.lower.build import CompiledModel
from rpn2c.passes import optimize
from rpn2c.runtime.explain import explain_text

D = 6  # model width


def _spec(heads, kv, rank, out, xi_bias, head_bias, causal, padding, rotary, layers=1):
    xi = [f"rank = {rank}"] + (["bias = true"] if xi_bias else []) + (["causal = true"] if causal else [])
    xi += (["key_padding = pad"] if padding else []) + ([f"rotary = {rotary}"] if rotary else [])
    inputs = [f"input x: sequence[B, T, {D}]"] + (["input pad: block_mask[B, T]"] if padding else [])
    lines = ["model m {", *(f"  {i}" for i in inputs)]
    prev = "x"
    for i in range(layers):
        body = [f"heads = {heads}", *([f"kv_heads = {kv}"] if kv is not None else []),
                f"xi_instance = attention({', '.join(xi)})", f"out = {out}", f"fusion = concat_linear(out = {D})"]
        if not head_bias:
            body.append("bias = false")
        lines += [f"  y{i} = head({prev}) {{", *(f"    {b}" for b in body), "  }"]
        prev = f"y{i}"
    return "\n".join(lines + [f"  return {prev}", "}"])


def _build(text, reference=False, disable=()):
    return CompiledModel(optimize(rpn2c.check(text), disable=disable), reference=reference).double()


# ------------------------------------------------------------------------------------------------ hand-written
def _rotate_half(t):
    a, b = t.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def _rope(t, base):
    """Llama's rotary embedding: angles in float32, cast to the operand's dtype."""
    r, n = t.shape[-1], t.shape[-2]
    inv_freq = 1.0 / (base ** (torch.arange(0, r, 2, dtype=torch.int64).float() / r))
    freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    return t * emb.cos().to(t.dtype) + _rotate_half(t) * emb.sin().to(t.dtype)


def _repeat_kv(t, n_rep):
    b, g, n, w = t.shape
    return t if n_rep == 1 else t[:, :, None].expand(b, g, n_rep, n, w).reshape(b, g * n_rep, n, w)


def _hand_written(p, x, pad, heads, kv, rank, out, xi_bias, head_bias, causal, rotary):
    """One layer from its packed tensors: q/k/v projections, rotary, repeat_kv, softmax(q kᵀ/√r + masks) v, W_o."""
    b, t, _ = x.shape
    w, bias = p["in_proj_weight"], p.get("in_proj_bias")
    wq, wk, wv = w.split([heads * rank, kv * rank, kv * out])
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T
    at = 0
    if xi_bias:
        q, k = q + bias[:heads * rank], k + bias[heads * rank:(heads + kv) * rank]
        at = (heads + kv) * rank
    if head_bias:
        v = v + bias[at:at + kv * out]
    q = q.view(b, t, heads, rank).transpose(1, 2)
    k = k.view(b, t, kv, rank).transpose(1, 2)
    v = v.view(b, t, kv, out).transpose(1, 2)
    if rotary:
        q, k = _rope(q, rotary), _rope(k, rotary)
    k, v = _repeat_kv(k, heads // kv), _repeat_kv(v, heads // kv)
    scores = q @ k.transpose(-1, -2) / math.sqrt(rank)
    blocked = torch.zeros(b, 1, t, t, dtype=torch.bool)
    if causal:
        blocked = blocked | torch.ones(t, t, dtype=torch.bool).triu(1)
    if pad is not None:
        blocked = blocked | pad[:, None, None, :]
    attn = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    y = (attn @ v).transpose(1, 2).reshape(b, t, heads * out)
    return y @ p["fusion.linear.weight"].T + p["fusion.linear.bias"]


def _grads(model, x, pad, seed=3):
    model.zero_grad()
    x = x.clone().requires_grad_(True)
    y = model(x=x, **({"pad": pad} if pad is not None else {}))
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed), dtype=y.dtype)
    (y * w).sum().backward()
    return y.detach(), x.grad, {k: p.grad.clone() for k, p in model.named_parameters()}


@settings(deadline=None, max_examples=20)
@given(shape=st.sampled_from([(1, 1), (2, 1), (2, 2), (3, 1), (4, 1), (4, 2), (4, 4), (6, 2), (6, 3)]),
       rank=st.sampled_from([2, 4]), out=st.integers(1, 3), xi_bias=st.booleans(), head_bias=st.booleans(),
       causal=st.booleans(), padding=st.booleans(), rotary=st.sampled_from([None, 10000.0, 50.0]))
def test_both_lowerings_equal_hand_written_grouped_attention(shape, rank, out, xi_bias, head_bias, causal, padding,
                                                             rotary):
    heads, kv = shape
    text = _spec(heads, kv, rank, out, xi_bias, head_bias, causal, padding, rotary)
    g = torch.Generator().manual_seed(heads * 10 + kv)
    x = torch.randn(2, 5, D, generator=g, dtype=torch.float64)
    pad = None
    if padding:
        pad = torch.rand(2, 5, generator=g) < 0.4
        pad[:, 0] = False  # every query keeps a key (causal rows see key 0)
    fused = _build(text)
    assert fused.y0._fused_attention, text
    for model in (fused, _build(text, reference=True)):
        model.load_state_dict(fused.state_dict())
        assert_hand_written(model, x, pad, lambda p, xr: _hand_written(p, xr, pad, heads, kv, rank, out, xi_bias,
                                                                        head_bias, causal, rotary))


def assert_hand_written(model, x, pad, hand_written) -> None:
    """``model`` (one layer ``y0``) gives ``hand_written(its parameters, x)``'s output, input and parameter
    gradients in float64."""
    y, gx, grads = _grads(model, x, pad)
    params = {k.removeprefix("y0."): p.detach().clone().requires_grad_(True) for k, p in model.named_parameters()}
    xr = x.clone().requires_grad_(True)
    want = hand_written(params, xr)
    w = torch.randn(want.shape, generator=torch.Generator().manual_seed(3), dtype=want.dtype)
    (want * w).sum().backward()
    assert_close(y, want.detach(), rtol=1e-10, atol=1e-12)
    assert_close(gx, xr.grad, rtol=1e-10, atol=1e-12)
    for k, p in params.items():
        assert_close(grads["y0." + k], p.grad, rtol=1e-10, atol=1e-12, msg=k)


def test_the_per_head_forms_read_their_groups_tensors():
    """With the packed kernel switched off every head runs alone on views: head h's W_k and ψ are its group's."""
    text = _spec(4, 2, 2, 3, True, True, True, False, 10000.0)
    fused, alone = _build(text), _build(text, disable={"fused_heads"})
    alone.load_state_dict(fused.state_dict())
    x = torch.randn(2, 5, D, dtype=torch.float64)
    assert_close(alone(x=x), fused(x=x), rtol=1e-10, atol=1e-12)
    alone.y0.bind_views()
    hs = alone.y0.heads
    assert hs["h1"].xi_instance.w_k.data_ptr() == hs["h0"].xi_instance.w_k.data_ptr()
    assert hs["h2"].psi.weight.data_ptr() == hs["h3"].psi.weight.data_ptr() != hs["h0"].psi.weight.data_ptr()
    assert hs["h1"].xi_instance.w_q.data_ptr() != hs["h0"].xi_instance.w_q.data_ptr()


# ------------------------------------------------------------------------------------------------ parameters
@pytest.mark.parametrize("kv", [1, 2, 3, 6, None])
def test_parameters_are_counted_once_per_group(kv):
    heads, rank, out = 6, 2, 2
    text = _spec(heads, kv, rank, out, True, True, False, False, None)
    graph = rpn2c.check(text)
    g = heads if kv is None else kv
    want = heads * (D * rank + rank) + g * (D * rank + rank) + g * (D * out + out) + (heads * out * D + D)
    assert graph.param_count == want
    for reference in (False, True):
        model = _build(text, reference=reference)
        sd = model.state_dict()
        assert sum(t.numel() for t in sd.values()) == want
        assert sd["y0.in_proj_weight"].shape == (heads * rank + g * rank + g * out, D)
    # kv_heads = H is plain multi-head attention: the same tensors as without the setting
    if kv == heads:
        plain = _build(_spec(heads, None, rank, out, True, True, False, False, None))
        assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in sd.items()}


def test_check_and_explain_show_the_grouping():
    graph = optimize(rpn2c.check(_spec(4, 2, 2, 2, False, True, True, False, None)))
    text = explain_text(graph)
    assert "4 heads (kv_heads=2: W_k, ψ shared by 2 query heads each)" in text
    assert "fused_heads" in text
    plain = explain_text(optimize(rpn2c.check(_spec(4, None, 2, 2, False, True, True, False, None))))
    assert "kv_heads" not in plain


def test_a_spec_without_kv_heads_keeps_its_hash():
    """The setting joins the canonical form only when given: older specs keep their hashes and checkpoints."""
    plain = rpn2c.check(_spec(4, None, 2, 2, False, True, False, False, None))
    grouped = rpn2c.check(_spec(4, 2, 2, 2, False, True, False, False, None))
    assert "kv_heads" not in str(plain.canonical()) and grouped.content_hash() != plain.content_hash()


# ------------------------------------------------------------------------------------------------ one GEMM, one SDPA
class _Trace(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((str(func), [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)],
                           tuple(out.shape) if isinstance(out, torch.Tensor) else None))
        return out


@pytest.mark.parametrize("causal", [True, False])
def test_default_lowering_runs_one_sdpa_per_layer_on_group_wide_keys(causal):
    heads, kv, rank, out, layers = 4, 2, 8, 8, 2
    text = _spec(heads, kv, rank, out, True, True, causal, False, 10000.0, layers=layers)
    model = CompiledModel(optimize(rpn2c.check(text))).eval()
    x = torch.randn(2, 7, D)
    with torch.no_grad(), _Trace() as trace:
        model(x=x)
    sdpa = [c for c in trace.calls if "scaled_dot_product" in c[0]]
    assert len(sdpa) == layers, sdpa
    for _, shapes, _ in sdpa:  # queries of H heads, keys and values of G
        assert shapes[0][1] == heads and shapes[1][1] == kv and shapes[2][1] == kv, shapes
    width = heads * rank + kv * (rank + out)  # not heads · (2·rank + out)
    gemms = [c for c in trace.calls if c[0].split(".")[1] in ("addmm", "mm", "linear", "bmm")]
    assert sum(1 for *_, o in gemms if o is not None and o[-1] == width) == layers, gemms
    assert not any(o is not None and o[-1] == heads * (2 * rank + out) for *_, o in gemms)
    assert not any("repeat" in c[0] or "expand" in c[0] for c in trace.calls)  # no per-query-head k/v copies


# ------------------------------------------------------------------------------------------------ located errors
def _error(text):
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    d = info.value.diagnostics[0]
    return d.code, (d.span.line, d.span.col), d.message, d.suggestion or ""


def _head(settings: str) -> str:
    return ("model m {\n  input x: sequence[B, T, 12]\n  y = head(x) {\n" + settings +
            "\n    fusion = concat_linear(out = 12)\n  }\n  return y\n}")


@pytest.mark.parametrize("settings, code, col, words", [
    ("    heads = 4\n    kv_heads = 3\n    xi_instance = attention(rank = 3)\n    out = 3", "E0345", 16,
     ["must divide heads = 4", "1, 2, 4"]),
    ("    heads = 4\n    kv_heads = 8\n    xi_instance = attention(rank = 3)\n    out = 3", "E0345", 16,
     ["must divide heads = 4"]),
    ("    kv_heads = 2\n    xi_instance = attention(rank = 3)\n    out = 3", "E0345", 16, ["heads = 1"]),
    ("    heads = 4\n    kv_heads = 0\n    xi_instance = attention(rank = 3)\n    out = 3", "E0303", 16, [">= 1"]),
    ("    heads = 4\n    kv_heads = 2\n    out = 3", "E0346", 16, ["no attention ξ"]),
    ("    heads = 4\n    kv_heads = 2\n    xi_instance = bilinear\n    out = 3", "E0346", 16, ["no key projection"]),
    ("    heads = 4\n    kv_heads = 2\n    xi_instance = attention(rank = 3, softmax = false)\n    out = 3", "E0346",
     16, ["no softmax"]),
    ("    heads = 4\n    kv_heads = 2\n    xi_instance = attention(rank = 3)\n    channels = 2\n    out = 3", "E0346",
     16, ["attention alone"]),
])
def test_a_kv_heads_that_cannot_apply_is_a_located_error(settings, code, col, words):
    text = _head(settings)
    got, (line, c), message, hint = _error(text)
    want_line = 1 + text.splitlines().index(next(s for s in text.splitlines() if "kv_heads" in s))
    assert (got, line, c) == (code, want_line, col), (got, line, c, message)
    for w in words:
        assert w in message + hint, (message, hint)


def test_kv_heads_is_not_a_setting_of_a_declared_head():
    text = ("model m {\n  input x: sequence[B, T, 4]\n  y = layer(x) {\n    head a { xi_instance = attention(rank = 2)"
            " out = 2 kv_heads = 1 }\n    fusion = concat\n  }\n  return y\n}")
    code, (line, _), _, _ = _error(text)
    assert (code, line) == ("E0304", 4)
