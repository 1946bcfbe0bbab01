"""GLA's full layer (Yang et al. 2024, §4.4): heads, the low-rank gate sharpened by 1/τ, each head's LayerNorm and
the Swish output gate, against torch modules written from the paper's equations (float64, values and gradients):

    α_t = σ(x_t W_α1 W_α2 + b_α)^{1/τ},  S_t^h = Diag(α_t^h) S_{t−1}^h + k_t^hᵀ v_t^h,  o_t^h = q_t^h S_t^h,
    O' = [LN(O^1), …, LN(O^H)],  R = Swish(X W_r + b_r),  Y = (R ⊙ O') W_O.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

import rpn2c
from rpn2c.runtime.layer_matrix import layer_matrix
from rpn2c.runtime.matrix_view import ViewError
from tests.test_lowering_equivalence import _rand
from tests.test_selective_scan import SPECS, _equal_to_spec, _forms, _text, assert_same, by_hand


def _paper_gla(heads, tau, rank, norm, tied=False):
    """One direction of the cell from the paper's recurrence, head by head and step by step."""
    def run(x, p, h0):
        z = x @ p["weight_alpha_down"].T if rank else x
        alpha = torch.sigmoid(z @ p["weight_alpha"].T + p.get("bias_alpha", 0)) ** (1 / tau)
        q = x @ p["weight_q"].T
        k = 1 - alpha if tied else x @ p["weight_k"].T
        v = x @ p["weight_v"].T
        outs = []
        for a_h, q_h, k_h, v_h in zip(alpha.chunk(heads, -1), q.chunk(heads, -1), k.chunk(heads, -1),
                                      v.chunk(heads, -1)):
            s = x.new_zeros(x.shape[0], k_h.shape[-1], v_h.shape[-1])
            steps = []
            for t in range(x.shape[1]):
                s = a_h[:, t, :, None] * s + k_h[:, t, :, None] * v_h[:, t, None, :]
                o = torch.einsum("bk,bkv->bv", q_h[:, t], s)
                if norm:
                    mu, var = o.mean(-1, keepdim=True), o.var(-1, unbiased=False, keepdim=True)
                    o = (o - mu) / torch.sqrt(var + 1e-5) * p["norm_weight"] + p["norm_bias"]
                steps.append(o)
            outs.append(torch.stack(steps, 1))
        return torch.cat(outs, -1)
    return run


@pytest.mark.parametrize("cell, heads, tau, rank, norm, tied", [
    ("gla(d_key = 4, heads = 2)", 2, 1, None, False, False),
    ("gla(d_key = 4, heads = 2, tau = 16, gate_rank = 2)", 2, 16, 2, False, False),
    ("gla(d_key = 6, heads = 3, tau = 4, norm = true)", 3, 4, None, True, False),
    ("gla(d_key = 4, heads = 2, gate_rank = 3, norm = true, tied = true)", 2, 1, 3, True, True),
])
@pytest.mark.parametrize("bi, layers", [(False, 1), (True, 2)])
def test_the_cell_is_the_papers_recurrence_in_every_form(cell, heads, tau, rank, norm, tied, bi, layers):
    text = _text(cell, 3, 6, layers, bi, True, False)
    x = _rand(2, 5, 3, seed=1)
    for model in _forms(text):
        if norm:  # a learned scale and shift away from their initial 1 and 0
            for name, p in model.named_parameters():
                if "norm_" in name:
                    p.data.copy_(_rand(*p.shape, seed=len(name)))
        assert sum(p.numel() for p in model.parameters()) == rpn2c.check(text).param_count
        assert_same(model(x), by_hand(model, "y", _paper_gla(heads, tau, rank, norm, tied), x, None, layers, bi),
                    list(model.parameters()))


def test_one_head_without_the_options_is_the_bare_cell():
    """heads = 1, τ = 1, no rank, no norm: the bare cell's parameters and values (the defaults change nothing)."""
    plain, full = _text("gla(d_key = 2)", 2, 4, 1, False, True, False), _text(
        "gla(d_key = 2, heads = 1, tau = 1)", 2, 4, 1, False, True, False)
    assert rpn2c.check(plain).content_hash() == rpn2c.check(full).content_hash()


def test_the_sharpened_gate_decays_more_slowly():
    """σ(·)^{1/τ} with τ > 1 lies closer to 1 than σ(·): the state forgets less (what τ = 16 is for)."""
    text = _text("gla(d_key = 2, tau = 16)", 2, 2, 1, False, True, False)
    torch.manual_seed(0)
    model = rpn2c.compile(text).double()
    w = {k.removesuffix("_l0"): v for k, v in dict(model.y.named_parameters()).items()}
    x = _rand(1, 4, 2, seed=3)
    a, _ = model.y.cell.terms(x, w)
    plain = torch.sigmoid(x @ w["weight_alpha"].T + w["bias_alpha"])
    assert_close(a.reshape(1, 4, 2, 2)[..., 0], plain ** (1 / 16))
    assert (a.reshape(1, 4, 2, 2)[..., 0] > plain).all()


class _GLALayerNet(nn.Module):
    """examples/specs/gla_layer.rpn written from the paper: e = Wx + b, the GLA layer, residual, mean, classifier."""

    def __init__(self, features=1, hidden=16, key=8, heads=2, rank=4, out=2):
        super().__init__()
        self.heads = heads
        self.e, self.y = nn.Linear(features, hidden), nn.Linear(hidden, out)
        self.a1, self.a2 = nn.Linear(hidden, rank, bias=False), nn.Linear(rank, key)
        self.q, self.k = nn.Linear(hidden, key, bias=False), nn.Linear(hidden, key, bias=False)
        self.v = nn.Linear(hidden, hidden, bias=False)
        self.ln = nn.LayerNorm(hidden // heads)
        self.r, self.o = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden, bias=False)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        e = self.e(x)
        alpha = torch.sigmoid(self.a2(self.a1(e))) ** (1 / 16)
        b, t = e.shape[:2]
        split = (b, t, self.heads, -1)
        alpha, q, k, v = (z.reshape(split) for z in (alpha, self.q(e), self.k(e), self.v(e)))
        s = e.new_zeros(b, self.heads, k.shape[-1], v.shape[-1])
        outs = []
        for i in range(t):
            s = alpha[:, i, :, :, None] * s + k[:, i, :, :, None] * v[:, i, :, None, :]
            outs.append(torch.einsum("bhk,bhkv->bhv", q[:, i], s))
        o = self.ln(torch.stack(outs, 1)).reshape(b, t, -1)  # O' = [LN(O^1), …, LN(O^H)]
        z = self.o(F.silu(self.r(e)) * o) + e
        return self.y(z.mean(1))


def test_gla_layer_spec_equals_the_papers_layer():
    torch.manual_seed(0)

    def state(n):
        return {"e.psi.weight": n.e.weight, "e.bias": n.e.bias, "s.weight_alpha_down_l0": n.a1.weight,
                "s.weight_alpha_l0": n.a2.weight, "s.bias_alpha_l0": n.a2.bias, "s.weight_q_l0": n.q.weight,
                "s.weight_k_l0": n.k.weight, "s.weight_v_l0": n.v.weight, "s.norm_weight_l0": n.ln.weight,
                "s.norm_bias_l0": n.ln.bias, "r.psi.weight": n.r.weight, "r.bias": n.r.bias,
                "o.psi.weight": n.o.weight, "y.psi.weight": n.y.weight, "y.bias": n.y.bias}

    _equal_to_spec(SPECS / "gla_layer.rpn", _GLALayerNet(), state, _rand(3, 9, 1))


def test_the_matrix_view_of_heads_is_the_output_and_a_norm_has_none():
    torch.manual_seed(0)
    model = rpn2c.compile(_text("gla(d_key = 4, heads = 2, gate_rank = 2)", 2, 4, 1, False, True, False)).double()
    x = _rand(2, 4, 2, seed=7)
    view = layer_matrix(model, "y", {"x": x}, sample=1)
    assert_close(view.output(), model(x)[1], rtol=1e-10, atol=1e-10)
    normed = rpn2c.compile(_text("gla(d_key = 4, heads = 2, norm = true)", 2, 4, 1, False, True, False)).double()
    with pytest.raises(ViewError, match="normalises its output"):
        layer_matrix(normed, "y", {"x": x}, sample=1)


@pytest.mark.parametrize("cell, out, code, says", [
    ("gla(d_key = 4, heads = 3)", 6, "E0303", "divisible by heads = 3"),
    ("gla(d_key = 4, heads = 2)", 5, "E0402", "multiple of 2"),
])
def test_heads_that_do_not_divide_are_located_errors(cell, out, code, says):
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(_text(cell, 2, out, 1, False, True, False))
    diag = info.value.diagnostics[0]
    assert diag.code == code and diag.span.line == 3 and says in str(info.value)
