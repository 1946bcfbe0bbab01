"""Parameterized ξ (paper §5.1.5, eq 57–62) equal their reconciliation formulas.

ψ(w) for each family: W (full), A Bᵀ (low rank), A ⊗ (S T) (LPHM), (P Q) ⊗ (S T) (dual LPHM), diag(λ₁) A diag(λ₂) Bᵀ
(random matrix adaption, eq 164). An instance ξ is stored as ψ (rows = outputs, `A X`), an attribute ξ as ψᵀ (`X A`);
a compiled head applies it before ψ of the head."""

from __future__ import annotations

import pytest
import torch

import rpn2c
from rpn2c.components.base import XiContext
from rpn2c.components.registry import REGISTRY

F64 = torch.float64
FORMULA = {
    "parameterized": (lambda f: f.W, {"out": 3}),
    "lowrank_parameterized": (lambda f: f.A @ f.B.T, {"r": 2}),
    "lphm_parameterized": (lambda f: torch.kron(f.A, f.S @ f.T), {"out": 6, "p": 3, "q": 1, "r": 1}),
    "dual_lphm_parameterized": (lambda f: torch.kron(f.P @ f.Q, f.S @ f.T), {"out": 6, "p": 3, "q": 1, "r": 2}),
    "rma_parameterized": (lambda f: torch.diag(f.lambda1) @ f.A @ torch.diag(f.lambda2) @ f.B.T, {"r": 2}),
}


def _module(name, axis, size, **hp):
    entry = REGISTRY["interdependence"][name]
    comp = entry.cls(entry.schema(**hp))
    mod = comp.build(XiContext(axis, size, size, size, size, {})).double()
    with torch.no_grad():
        for p in mod.parameters():
            p.normal_()
    return mod


@pytest.mark.parametrize("axis", ["instance", "attribute"])
@pytest.mark.parametrize("name", sorted(FORMULA))
def test_matrix_is_the_reconciled_parameters(name, axis):
    formula, hp = FORMULA[name]
    mod = _module(name, axis, 5, **hp)
    psi = formula(mod.fab)
    want = psi if axis == "instance" else psi.T
    torch.testing.assert_close(mod.matrix(None, None, {}, 5), want, rtol=0, atol=0)


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_head_with_a_low_rank_instance_xi_is_its_formula(reference):
    """y = (A Bᵀ) X Wᵀ + b on every sample: the ξ mixes the 5 items, ψ maps 4 features to 3."""
    spec = ("model m { input x: sequence[B, 5, 4]  y = head(x) { xi_instance = lowrank_parameterized(r = 2)  "
            "out = 3 } return y }")
    torch.manual_seed(0)
    model = rpn2c.compile(spec, reference=reference).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    sd = model.state_dict()
    A = next(v for k, v in sd.items() if k.endswith("fab.A"))
    B = next(v for k, v in sd.items() if k.endswith("fab.B"))
    W = next(v for k, v in sd.items() if k.endswith("weight") and v.shape == (3, 4))
    b = next(v for k, v in sd.items() if k.endswith("bias"))
    x = torch.randn(2, 5, 4, dtype=F64)
    want = torch.einsum("ij,bjd->bid", A @ B.T, x) @ W.T + b
    torch.testing.assert_close(model(x=x), want)
