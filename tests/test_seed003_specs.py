"""The Hadamard survey (seed 003) as shipped specs and a ψ: CoPE (eq. 4), Poly-SA (eq. 9) and causal linear
attention (eq. 7) each equal a torch module written from the survey's equation with the same weights (outputs and
parameter gradients, both lowerings, float64); LoHa (Table 1) ψ = (A1 B1ᵀ) ⊙ (A2 B2ᵀ) with its count rule, its
factored apply and both lowerings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

import rpn2c
from rpn2c.components import REGISTRY
from rpn2c.functional import loha as R
from tests.test_lowering_equivalence import assert_equivalent
from tests.test_specs import header_shapes

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"
F64 = torch.float64


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


class CoPE(nn.Module):
    """Eq. (4), two inputs, degree N: y₁ = (A₁ᵀz_I + A'₁ᵀz_II) ⊙ b₁, y_n = (A_nᵀz_I + A'_nᵀz_II) ⊙ (S_nᵀy_{n−1} + b_n),
    y = C y_N + β."""

    def __init__(self, fi, fii, k, o, degree=3):
        super().__init__()
        self.a = nn.ModuleList(nn.Linear(fi, k, bias=False) for _ in range(degree))
        self.c = nn.ModuleList(nn.Linear(fii, k, bias=False) for _ in range(degree))
        self.s = nn.ModuleList(nn.Linear(k, k) for _ in range(degree - 1))
        self.b1 = nn.Parameter(torch.randn(k))
        self.out = nn.Linear(k, o)

    def forward(self, zi, zii):
        y = (self.a[0](zi) + self.c[0](zii)) * self.b1
        for a, c, s in zip(self.a[1:], self.c[1:], self.s):
            y = (a(zi) + c(zii)) * s(y)
        return self.out(y)


class PolySA(nn.Module):
    """Eq. (9): Y = {Ψ((Z W₁) ⊙ (Z W₂)) ⊙ Z} W₃, Ψ the mean over the n items replicated."""

    def __init__(self, d):
        super().__init__()
        self.w1, self.w2, self.w3 = (nn.Linear(d, d, bias=False) for _ in range(3))

    def forward(self, z):
        psi = (self.w1(z) * self.w2(z)).mean(dim=1, keepdim=True).expand_as(z)
        return self.w3(psi * z)


class CausalLinearAttention(nn.Module):
    """Eq. (7) as the survey's S.2.1 code: scores = bmm(Q, Kᵀ)/√d_k; scores = scores * tril(ones); bmm(scores, V)."""

    def __init__(self, d, dk, dv):
        super().__init__()
        self.q, self.k = nn.Linear(d, dk, bias=False), nn.Linear(d, dk, bias=False)
        self.v = nn.Linear(d, dv, bias=False)
        self.dk = dk

    def forward(self, x):
        scores = torch.bmm(self.q(x), self.k(x).transpose(1, 2)) / self.dk ** 0.5
        n = x.shape[1]
        scores = scores * torch.tril(torch.ones(n, n, dtype=x.dtype))
        return torch.bmm(scores, self.v(x))


def _cope_state(m):
    state = {"b1.bias": m.b1, "y.psi.weight": m.out.weight, "y.bias": m.out.bias}
    for n in range(3):
        state[f"a{n + 1}.psi.weight"] = m.a[n].weight
        state[f"c{n + 1}.psi.weight"] = m.c[n].weight
    for n in range(2):
        state[f"s{n + 2}.psi.weight"], state[f"s{n + 2}.bias"] = m.s[n].weight, m.s[n].bias
    return state


def _poly_sa_state(m):
    return {"a.psi.weight": m.w1.weight, "b.psi.weight": m.w2.weight, "y.psi.weight": m.w3.weight}


def _linear_attention_state(m):
    # ξ stores W_q, W_k as [d, r] (X W_q); nn.Linear stores the transpose
    return {"y.xi_instance.w_q": (m.q.weight, True), "y.xi_instance.w_k": (m.k.weight, True),
            "y.psi.weight": m.v.weight}


CASES = {
    "cope": (lambda: CoPE(6, 3, 8, 4), _cope_state, [(3, 6), (3, 3)]),
    "poly_sa": (lambda: PolySA(8), _poly_sa_state, [(2, 5, 8)]),
    "linear_attention": (lambda: CausalLinearAttention(6, 4, 5), _linear_attention_state, [(2, 7, 6)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_spec_equals_hand_written_torch(name, reference):
    make, state_of, shapes = CASES[name]
    torch.manual_seed(0)
    module = make().double()
    path = SPECS / f"{name}.rpn"
    model = rpn2c.compile_file(path, reference=reference).double()
    counts = {sum(p.numel() for p in m.parameters()) for m in (model, module)}
    assert counts == {rpn2c.check_file(path).param_count}
    links = {k: v if isinstance(v, tuple) else (v, False) for k, v in state_of(module).items()}
    model.load_state_dict({k: (v.T if t else v).detach().clone() for k, (v, t) in links.items()}, strict=True)
    xs = [_rand(*s, seed=i) for i, s in enumerate(shapes)]
    outs = [f(*xs) for f in (module, model)]
    assert_close(outs[1], outs[0])
    w = _rand(*outs[0].shape, seed=7)
    torch.autograd.backward([(y * w).sum() for y in outs])
    for mine, p in model.named_parameters():
        theirs, transposed = links[mine]
        assert_close(p.grad, theirs.grad.T if transposed else theirs.grad, msg=f"gradient of {mine}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_spec_header_states_formula_and_inferred_shapes(name):
    text = (SPECS / f"{name}.rpn").read_text(encoding="utf-8")
    assert text.startswith(f"# {name}.rpn - ") and len(text.splitlines()) <= 40
    have = {n.id: str(n.type) for n in rpn2c.check_file(SPECS / f"{name}.rpn").nodes()}
    want = header_shapes(text)
    assert want and all(have.get(k) == v for k, v in want.items()), (want, have)


def test_causal_linear_attention_is_a_recurrence_with_matrix_state():
    """Eq. (7) = an RNN with state S_t = S_{t−1} + k_t v_tᵀ and output y_t = q_tᵀ S_t / √d_k (other_seeds §5):
    the compiled spec's output at t depends on items ≤ t only and equals that recurrence."""
    torch.manual_seed(0)
    model = rpn2c.compile_file(SPECS / "linear_attention.rpn").double()
    x = _rand(2, 7, 6)
    y = model(x)
    xi = model.y.xi_instance
    q, k, v = x @ xi.w_q, x @ xi.w_k, x @ model.y.psi.weight.T
    state = torch.zeros(2, 4, 5, dtype=F64)
    for t in range(7):
        state = state + k[:, t, :, None] * v[:, t, None, :]
        assert_close(y[:, t], (q[:, t, None, :] @ state).squeeze(1) * 0.5)
    x2 = x.clone()
    x2[:, 4:] = _rand(2, 3, 6, seed=9)  # the future changes, the past outputs do not
    assert_close(model(x2)[:, :4], y[:, :4])


# ------------------------------------------------------------------------------------------------ LoHa ψ
@pytest.mark.parametrize("n, D, r", [(5, 6, 1), (5, 6, 2), (12, 16, 2), (3, 4, 3)])
def test_loha_count_matrix_and_factored_apply(n, D, r):
    entry = REGISTRY["reconciliation"]["loha"]
    comp = entry.cls(entry.schema(r=r))
    assert comp.check(n, D) is None
    torch.manual_seed(0)
    mod = comp.build(n, D).double()
    assert comp.count(n, D) == 2 * r * (n + D) == sum(p.numel() for p in mod.parameters())
    t = mod.tensors()
    want = (t["A1"] @ t["B1"].T) * (t["A2"] @ t["B2"].T)
    assert_close(mod.matrix(), want)
    assert torch.linalg.matrix_rank(want) <= min(r * r, n, D)
    z = _rand(3, D)
    assert_close(mod.apply(z), z @ want.T)
    # the factored form by the mixed-product rule, whichever branch apply took
    assert_close(R.loha_apply(z, t, n, D, r=r), z @ want.T)
    assert_close((z @ R._face_split(t["B1"], t["B2"])) @ R._face_split(t["A1"], t["A2"]).T, z @ want.T)


def test_loha_rank_exceeds_lorr_at_equal_parameters():
    """2r(n + D) parameters give rank r² (here 4 > 2 = the LoRR rank of the same count)."""
    torch.manual_seed(1)
    mod = REGISTRY["reconciliation"]["loha"].cls(REGISTRY["reconciliation"]["loha"].schema(r=2)).build(8, 8).double()
    assert torch.linalg.matrix_rank(mod.matrix()) == 4


@settings(max_examples=10, deadline=None)
@given(r=st.integers(1, 3), out=st.integers(2, 6), channels=st.integers(1, 2))
def test_loha_head_default_equals_reference(r, out, channels):
    text = (f"model l {{ input x: sequence[B, 5, 4] y = head(x) {{ psi = loha(r = {r})  out = {out}  "
            f"channels = {channels} }} return y }}")
    assert_equivalent(text, {"x": _rand(2, 5, 4)})
    assert rpn2c.check(text).param_count == channels * 2 * r * (out + 4) + out
