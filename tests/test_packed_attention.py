"""Identical attention heads stored packed (``rpn2c/ir/layout.py``) and run as one GEMM + one SDPA (``fused_sdpa``):
the same function as each head computed alone and as the reference lowering's literal matrices, in float64, for
every combination of biases, masks, keys and widths; per-head checkpoints still load."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.lower.build import CompiledModel
from rpn2c.passes import optimize


def _spec(heads, rank, out, xi_bias, head_bias, mask, keys, full, cross):
    xi = ["bias = true"] if xi_bias else []
    inputs = ["input x: sequence[B, T, 6]"]
    if cross:
        inputs.append("input c: sequence[B, S, 5]")
    if keys:
        inputs.append(f"input k: sequence[B, {'S' if cross else 'T'}, 3]")
        xi.append("keys = k")
    if mask == "causal":
        xi.append("causal = true")
    elif mask == "window":
        xi.append("window = 1")
    elif mask == "padding":
        inputs.append(f"input pad: block_mask[B, {'S' if cross else 'T'}]")
        xi.append("key_padding = pad")
    xi_call = f"bilinear({', '.join(xi)})" if full else f"attention({', '.join(['rank = %d' % rank, *xi])})"
    body = [f"heads = {heads}", f"xi_instance = {xi_call}", f"out = {out}", "fusion = concat_linear(out = 4)"]
    if not head_bias:
        body.append("bias = false")
    arg = "x, context = c" if cross else "x"
    lines = ["model m {", *(f"  {i}" for i in inputs), f"  y = head({arg}) {{", *(f"    {b}" for b in body),
             "  }", "  return y", "}"]
    return "\n".join(lines)


def _inputs(text, seed=0):
    g = torch.Generator().manual_seed(seed)
    b, t, s = 2, 5, 4
    out = {"x": torch.randn(b, t, 6, generator=g, dtype=torch.float64)}
    cross = "input c:" in text
    if cross:
        out["c"] = torch.randn(b, s, 5, generator=g, dtype=torch.float64)
    if "input k:" in text:
        out["k"] = torch.randn(b, s if cross else t, 3, generator=g, dtype=torch.float64)
    if "input pad:" in text:
        pad = torch.rand(b, s if cross else t, generator=g) < 0.4
        pad[0] = True  # sample 0: every key blocked, so each query's row of A is 0 and the head adds only b
        out["pad"] = pad
    return out


def _build(text, reference=False, disable=()):
    return CompiledModel(optimize(rpn2c.check(text), disable=disable), reference=reference).double().eval()


def _run(model, inputs):
    model.zero_grad()
    y = model(**inputs)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype)
    (y * w).sum().backward()
    return y.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


@settings(deadline=None)
@given(heads=st.integers(1, 3), rank=st.integers(1, 3), out=st.integers(1, 3), xi_bias=st.booleans(),
       head_bias=st.booleans(), mask=st.sampled_from([None, "causal", "window", "padding"]), keys=st.booleans(),
       full=st.booleans(), cross=st.booleans())
def test_packed_heads_equal_the_per_head_and_the_reference_lowering(heads, rank, out, xi_bias, head_bias, mask,
                                                                    keys, full, cross):
    text = _spec(heads, rank, out, xi_bias, head_bias, mask, keys, full, cross)
    inputs = _inputs(text)
    fused = _build(text)
    assert fused.y._fused_attention, text
    state = fused.state_dict()
    assert set(state) == {k for k, _ in fused.named_parameters()}, "the packed tensors are the parameters"
    want = _run(fused, inputs)
    for other in (_build(text, disable={"fused_heads"}), _build(text, reference=True)):
        other.load_state_dict(state)
        assert set(other.state_dict()) == set(state)
        got = _run(other, inputs)
        assert_close(got[0], want[0], rtol=1e-10, atol=1e-10, msg=lambda m: f"{m}\n{text}")
        for k in want[1]:
            assert_close(got[1][k], want[1][k], rtol=1e-9, atol=1e-10, msg=lambda m, k=k: f"grad {k}: {m}\n{text}")


def test_layout_follows_torch_packing():
    """Equal widths: one in_proj_weight [H(2r + n), D] and one in_proj_bias; a full bilinear ξ has no key rows;
    different widths: one tensor per part (torch's q/k/v_proj_weight)."""
    m = _build(_spec(3, 2, 4, True, True, None, False, False, False))
    assert tuple(m.y.in_proj_weight.shape) == (3 * (2 + 2 + 4), 6)
    assert tuple(m.y.in_proj_bias.shape) == (3 * (2 + 2 + 4),)
    full = _build(_spec(2, 2, 3, False, True, None, False, True, False))
    assert tuple(full.y.in_proj_weight.shape) == (2 * (6 + 3), 6) and tuple(full.y.in_proj_bias.shape) == (6,)
    cross = _build(_spec(2, 2, 3, False, False, None, True, False, True))
    names = {k for k, _ in cross.named_parameters()}
    assert {"y.q_proj_weight", "y.k_proj_weight", "y.v_proj_weight"} <= names and "y.in_proj_bias" not in names
    assert tuple(cross.y.k_proj_weight.shape) == (4, 3) and tuple(cross.y.v_proj_weight.shape) == (6, 5)


def _per_head_state(model) -> dict:
    """The checkpoint layout before packing: each head's w_q [M, r], w_k, b_q, b_k, ψ and bias."""
    model.y.bind_views()
    state = {k: v for k, v in model.state_dict().items() if "proj" not in k}
    for link in model.y.packed.links:
        state[f"y.{link.path}"] = getattr(link.module, link.attr).detach().clone()
    return state


@pytest.mark.parametrize("heads", [1, 3])
def test_a_per_head_checkpoint_loads_into_the_packed_layer(heads):
    text = _spec(heads, 2, 3, True, True, "causal", False, False, False)
    torch.manual_seed(0)
    src = _build(text)
    old = _per_head_state(src)
    prefix = "y.heads.h0." if heads > 1 else "y."
    assert f"{prefix}xi_instance.w_q" in old and f"{prefix}psi.weight" in old and "y.in_proj_weight" not in old
    inputs = _inputs(text)
    for reference in (False, True):
        torch.manual_seed(1)  # other initial values, replaced by the load
        dst = _build(text, reference=reference)
        dst.load_state_dict(old)
        assert_close(dst(**inputs), src(**inputs), rtol=1e-12, atol=1e-12)


def test_a_partial_per_head_checkpoint_is_reported_by_strict_loading():
    text = _spec(2, 2, 3, False, True, None, False, False, False)
    old = _per_head_state(_build(text))
    del old["y.heads.h1.psi.weight"]
    with pytest.raises(RuntimeError, match="in_proj_weight"):
        _build(text).load_state_dict(old)


def test_pre_processing_of_the_query_keeps_the_fusion_one_gemm_on_the_heads_outputs():
    """Only a head's own processing needs its output apart; a layer's pre-processing (pre-norm) does not: the
    heads' outputs go to the concat_linear GEMM as one [B, N, H·n] view, with no unbind or cat."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    text = _spec(3, 2, 2, True, True, None, False, False, False).replace("heads = 3", "heads = 3\n    pre = [layer_norm]")
    model = _build(text)
    assert "process" in str(model.graph.node("y").terms[1])
    with Ops() as ops:
        model(**_inputs(text))
    assert not any("cat" in f or "unbind" in f for f in ops.seen), ops.seen
