"""DRRT's regional module as seed 002 writes it (eq 5–9, 12–13), ``examples/specs/drrt_regions.rpn``, against a
torch module written from the equations:

    Ψ^σ_ij = (W_a' a'_i)ᵀ W_σ (W_b' b'_j)     one W_a', W_b' pair; W_g for the global map, W_r for the K regions
    R^{r(k)}_ij = 1 iff a'_i ∈ A'^R_k and b'_j ∈ B'^R_k   (item i of n in region ⌊i·K/n⌋: K equal spans)
    α^{r(k)} = softmax_j(R^{r(k)} ⊙ Ψ^r)/C_r (literal eq 7) or softmax over region k's pairs only (blocked; a row
               outside the region is 0),  C_r = Σ_ijk R^{r(k)}_ij / √d   (eq 6, 9)
    A'_{b'→a'} = [T^g ; Σ_k T^{r(k)}] W_t,  T^{r(k)} = α'^{r(k)} B' W_b̃ᵀ, α' the local recurrence over rows (§3)

with W_σ held as Q_σ K_σᵀ (rank d: any d x d matrix), one map recurrence for the K regional maps of a direction.
Float64, outputs and every parameter's gradient, both lowerings, both readings of eq 7.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import rpn2c
from tests.test_drrt_faithful import (CLASSES, FA, FB, FC, D, K, M, N, SPEC, LocalRNN, _equal_with_copied_weights,
                                      _rand, _rnn_links)

REGIONS = 2
PATH = SPEC.with_name("drrt_regions.rpn")
TEXT = PATH.read_text(encoding="utf-8")
LITERAL = TEXT.replace("scale = 1.0)", 'scale = 1.0, window_scores = "multiply")')


def region_pairs(n, m, k):
    """R^{r(k)} [n, m] of eq 8, entry by entry."""
    return torch.tensor([[i * REGIONS // n == k and j * REGIONS // m == k for j in range(m)] for i in range(n)])


def regional_maps(psi, literal, over):
    """α^{r(k)} (``over = 2``: softmax over j) or β^{r(k)} (``over = 1``: over i), k = 0 … K − 1, before 1/C_r."""
    n, m = psi.shape[1:]
    maps = []
    for k in range(REGIONS):
        r = region_pairs(n, m, k)
        if literal:
            maps.append(torch.softmax(r * psi, dim=over))
        else:
            e = torch.exp(psi - psi.amax((1, 2), keepdim=True)) * r
            total = e.sum(over, keepdim=True)
            maps.append(torch.where(total > 0, e / total.clamp_min(1e-300), 0.0))
    return maps


class DRRTRegions(nn.Module):
    def __init__(self, literal=False):
        super().__init__()
        self.literal = literal
        self.sa, self.sb = LocalRNN(FA, D, D), LocalRNN(FB, D, D)
        self.w_a, self.w_b = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)  # W_a', W_b'
        self.q_g, self.k_g, self.q_r, self.k_r = (nn.Parameter(torch.randn(D, D) / math.sqrt(D)) for _ in range(4))
        self.maps = nn.ModuleDict({"ag": LocalRNN(M, K, M), "bg": LocalRNN(N, K, N),
                                   "ar": LocalRNN(M, K, M), "br": LocalRNN(N, K, N)})
        self.w_bt, self.w_at = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)  # W_b̃', W_ã'
        self.w_t = nn.Linear(2 * D, D, bias=False)
        self.fc = nn.ModuleList([nn.Linear(D, FC), nn.Linear(FC, FC), nn.Linear(FC, CLASSES)])

    @staticmethod
    def c_r(n, m):
        return sum(region_pairs(n, m, k).sum().item() for k in range(REGIONS)) / math.sqrt(D)  # eq 9

    def forward(self, a, b):
        a1, b1 = self.sa(a), self.sb(b)
        pa, pb = self.w_a(a1), self.w_b(b1)
        psi_g = pa @ (self.q_g @ self.k_g.T) @ pb.transpose(1, 2)  # eq 5
        psi_r = pa @ (self.q_r @ self.k_r.T) @ pb.transpose(1, 2)  # eq 7's W_r [W_a' a'_i; W_b' b'_j], bilinear
        alpha_g, beta_g = torch.softmax(psi_g / math.sqrt(D), 2), torch.softmax(psi_g / math.sqrt(D), 1)  # eq 3–4
        c = self.c_r(N, M)
        alpha_r = [x / c for x in regional_maps(psi_r, self.literal, 2)]  # eq 6
        beta_r = [x / c for x in regional_maps(psi_r, self.literal, 1)]
        vb, va = self.w_bt(b1), self.w_at(a1)
        t_ab = [self.maps["ag"](alpha_g) @ vb, sum(self.maps["ar"](x) @ vb for x in alpha_r)]  # eq 10, Σ_k
        t_ba = [self.maps["bg"](beta_g.transpose(1, 2)) @ va,
                sum(self.maps["br"](x.transpose(1, 2)) @ va for x in beta_r)]  # eq 11
        zab, zba = a1 + self.w_t(torch.cat(t_ab, -1)), b1 + self.w_t(torch.cat(t_ba, -1))  # eq 12–15
        y = (zab.mean(1) + zba.mean(1)) / 2
        return self.fc[2](torch.relu(self.fc[1](torch.relu(self.fc[0](y)))))


def links(module):
    inv_c = 1 / module.c_r(N, M)
    out = {}
    for s, t in (("a", "sa"), ("b", "sb")):
        out |= _rnn_links(f"h{s}", t) | {f"{s}1.psi.weight": (f"{t}.w.weight", 1), f"{s}1.bias": (f"{t}.w.bias", 1)}
    out |= {"pa.psi.weight": ("w_a.weight", 1), "pb.psi.weight": ("w_b.weight", 1)}
    for r, (q, k) in {"ag": ("q_g", "k_g"), "bg": ("k_g", "q_g"), "ar0": ("q_r", "k_r"), "ar1": ("q_r", "k_r"),
                      "br0": ("k_r", "q_r"), "br1": ("k_r", "q_r")}.items():
        out |= {f"{r}.xi.w_q": (q, 1), f"{r}.xi.w_k": (k, 1)}
    for spec, t, f in (("ag1", "ag", 1), ("bg1", "bg", 1), ("ar0m", "ar", inv_c), ("ar1m", "ar", inv_c),
                       ("br0m", "br", inv_c), ("br1m", "br", inv_c)):
        out |= _rnn_links(f"{spec}.h", f"maps.{t}", f)  # 1/C_r in the regional recurrences' U
        out |= {f"{spec}.o.psi.weight": (f"maps.{t}.w.weight", 1), f"{spec}.o.bias": (f"maps.{t}.w.bias", 1)}
    out |= {"vb.psi.weight": ("w_bt.weight", 1), "va.psi.weight": ("w_at.weight", 1),
            "tab.psi.weight": ("w_t.weight", 1), "tba.psi.weight": ("w_t.weight", 1)}
    for s, i in (("f1", 0), ("f2", 1), ("y", 2)):
        out |= {f"{s}.psi.weight": (f"fc.{i}.weight", 0.5 if i == 0 else 1), f"{s}.bias": (f"fc.{i}.bias", 1)}
    return out


@pytest.mark.parametrize("literal", [False, True], ids=["blocked", "literal_eq7"])
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_drrt_regions_equals_the_seed_equations(reference, literal):
    torch.manual_seed(0)
    module = DRRTRegions(literal).double()
    model = rpn2c.compile(LITERAL if literal else TEXT, path=PATH, reference=reference).double()
    assert rpn2c.check_file(PATH).param_count == sum(p.numel() for p in module.parameters())
    _equal_with_copied_weights(module, model, links(module))


def test_region_maps_are_the_blocks_of_eq_8():
    """Each regional map is non-zero on its region pair's block only (blocked), or has uniform rows outside the
    region's queries (literal: those rows score 0 everywhere); W_r is its own tensor, shared by the K regions."""
    torch.manual_seed(0)
    model = rpn2c.compile(TEXT, path=PATH, reference=True).double()
    literal = rpn2c.compile(LITERAL, path=PATH, reference=True).double()
    literal.load_state_dict(model.state_dict())
    assert model.ar1.xi.w_q is model.ar0.xi.w_q and model.ar0.xi.w_q is not model.ag.xi.w_q
    a, b = _rand(2, N, FA), _rand(2, M, FB, seed=1)
    for k, name in enumerate(("ar0", "ar1")):
        r = region_pairs(N, M, k)
        maps = []
        for net in (model, literal):
            pa, pb = net.pa(net.a1(net.ha(a))), net.pb(net.b1(net.hb(b)))
            maps.append(getattr(net, name)(pa, pb))
        blocked, lit = maps
        assert (blocked[:, ~r] == 0).all() and (blocked[:, r] > 0).all()
        assert_close(blocked.sum(-1)[:, r.any(1)], torch.ones(2, int(r.any(1).sum()), dtype=torch.float64))
        outside_rows = ~r.any(1)
        assert_close(lit[:, outside_rows], torch.full_like(lit[:, outside_rows], 1 / M))


@pytest.mark.parametrize("xi, says", [
    ("attention(rank = 2, regions = 2)", "given together"),
    ("attention(rank = 2, regions = 2, region = 2)", "not one of the regions 0 … 1"),
])
def test_a_region_outside_the_k_regions_is_a_located_error(xi, says):
    text = f"model m {{\n  input x: sequence[B, 4, 3]\n  r = relation(x, xi = {xi})\n  return r\n}}\n"
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    diag = info.value.diagnostics[0]
    assert diag.code == "E0303" and diag.span.line == 3 and says in str(info.value)
