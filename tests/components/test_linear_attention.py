"""Linear attention (``linear_attention``, Katharopoulos et al. 2020) in float64 against hand-written torch: the
kernel op ``linear_attention`` (φ(Q)(φ(K)ᵀ z), prefix sums when causal), the same head with the rule switched off
(the module's matrix product) and the reference lowering (the literal matrix) agree in outputs and in the
gradients of the input and of every parameter; the kernel never builds an N x N tensor."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.errors import SpecError
from rpn2c.lower.build import CompiledModel
from rpn2c.passes import optimize
from tests.components.test_xi_structural import _Shapes


def _spec(n: int, rank: int, causal: bool, context: bool = False) -> str:
    ctx = "  input c: sequence[B, 5, 3]\n" if context else ""
    use = f"linear_attention(rank = {rank}, causal = {str(causal).lower()})"
    read = "head(x, context = c)" if context else "head(x)"
    return (f"model m {{\n  input x: sequence[B, {n}, 4]\n{ctx}  y = {read} {{ xi_instance = {use}  out = 3 }}\n"
            "  return y\n}\n")


def _build(text, reference=False, disable=()):
    return CompiledModel(optimize(rpn2c.check(text), disable=disable), reference=reference).double()


def _by_hand(model, x, c, causal):
    """``softmax``-free linear attention written out: φ = elu + 1, weights φ(q_t)·φ(k_s) over their row sum."""
    m = model.y.xi_instance
    phi = lambda t: torch.where(t > 0, t + 1, torch.exp(t))  # elu(t) + 1
    qf, kf = phi(x @ m.w_q), phi(c @ m.w_k)
    rows = []
    for t in range(x.shape[1]):
        keys = list(range(t + 1) if causal else range(c.shape[1]))
        w = torch.stack([(qf[:, t] * kf[:, s]).sum(-1) for s in keys], 1)  # [B, keys]
        rows.append((w[:, :, None] * c[:, keys]).sum(1) / w.sum(1, keepdim=True))
    return torch.stack(rows, 1) @ model.y.psi.weight.T + model.y.bias


@settings(deadline=None, max_examples=12)
@given(n=st.integers(1, 9), rank=st.integers(1, 4), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_kernel_literal_and_plain_lowerings_equal_hand_written_torch(n, rank, causal, seed):
    torch.manual_seed(seed)
    text = _spec(n, rank, causal)
    fast = _build(text)
    assert "linear_attention" in {t.op for t in fast.graph.node("y").terms[1].walk()}
    others = [_build(text, disable={"linear_attention"}), _build(text, reference=True)]
    assert "linear_attention" not in {t.op for t in others[0].graph.node("y").terms[1].walk()}
    for m in others:
        m.load_state_dict(fast.state_dict())
    x = torch.randn(2, n, 4, dtype=torch.float64, requires_grad=True)
    want = _by_hand(fast, x, x, causal)
    ref = torch.autograd.grad(want.square().sum(), (x, *fast.parameters()))
    for model in (fast, *others):
        got = model(x)
        assert_close(got, want)
        for a, b in zip(torch.autograd.grad(got.square().sum(), (x, *model.parameters())), ref):
            assert_close(a, b)


def test_cross_attention_reads_the_context_and_never_builds_the_matrix():
    text = _spec(40, 2, False, context=True)
    fast, ref = _build(text), _build(text, reference=True)
    ref.load_state_dict(fast.state_dict())
    x, c = torch.randn(2, 40, 4, dtype=torch.float64), torch.randn(2, 5, 3, dtype=torch.float64)
    shapes = _Shapes()
    with torch.no_grad(), shapes:
        y = fast(x, c)
    assert not any(s[-2:] == (40, 5) for s in shapes.shapes)  # no [Nq, Nc] weights
    assert_close(y, ref(x, c))


def test_causal_needs_as_many_queries_as_keys():
    with pytest.raises(SpecError, match="causal linear attention"):
        rpn2c.check(_spec(4, 2, True, context=True))
