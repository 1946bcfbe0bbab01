"""DRRT (seed 002) as ``examples/specs/drrt.rpn``, against a torch module written from the seed's equations.

The torch module follows eq. 1–2 (an Elman recurrence per stream, then A'_t = tanh(W_A' h_t + c)), the global
relation map α^g = softmax_j(Ψ_ij / √d) with the bilinear score Ψ_ij = (W_a' a'_i)·(W_b' b'_j), the local relation
map (Ψ with the pairs outside the window R_ij = [|i − j| <= k] set to −∞ before the softmax), eq. 10–15 with the
concatenation fusion and one W_t per direction, average fusion of the two pooled streams and a 3-layer classifier.
Equal in float64, outputs and every parameter's gradient, in both lowerings (docs/unification.md, "DRRT").
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import rpn2c
from tests.test_specs import header_shapes

SPEC = Path(__file__).resolve().parents[1] / "examples" / "specs" / "drrt.rpn"


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


class Stream(nn.Module):
    """Eq. 1–2: h_t = tanh(U x_t + V h_{t−1} + b_h), x'_t = tanh(W h_t + c) (c: eq. 2's own bias)."""

    def __init__(self, f, d):
        super().__init__()
        self.u, self.v, self.w = nn.Linear(f, d, bias=False), nn.Linear(d, d, bias=False), nn.Linear(d, d)
        self.b_h = nn.Parameter(torch.randn(d))

    def forward(self, x):
        h = x.new_zeros(x.shape[0], self.v.in_features)
        states = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.u(x[:, t]) + self.v(h) + self.b_h)
            states.append(h)
        return torch.tanh(self.w(torch.stack(states, 1)))


class Relation(nn.Module):
    """One direction (eq. 3, 6–8, 10, 12, 14): Z = Q + [α^g K W_ṽᵀ ; α^r K W_ṽᵀ] W_t, the maps from one Ψ."""

    def __init__(self, d, window):
        super().__init__()
        self.w_q, self.w_k, self.w_v = (nn.Parameter(torch.randn(d, d) / math.sqrt(d)) for _ in range(3))
        self.w_t = nn.Linear(2 * d, d, bias=False)
        self.window = window

    def forward(self, q, k):
        psi = torch.einsum("bir,bjr->bij", q @ self.w_q, k @ self.w_k) / math.sqrt(self.w_q.shape[1])
        n, m = psi.shape[1:]
        region = torch.tensor([[abs(i - j) <= self.window for j in range(m)] for i in range(n)])
        alpha_g = torch.softmax(psi, dim=-1)
        alpha_r = torch.softmax(psi.masked_fill(~region, float("-inf")), dim=-1)
        values = k @ self.w_v.T
        t_g, t_r = alpha_g @ values, alpha_r @ values
        return q + self.w_t(torch.cat([t_g, t_r], -1))


class DRRT(nn.Module):
    def __init__(self, fa=5, fb=3, d=8, window=1, fc=16, classes=2):
        super().__init__()
        self.sa, self.sb = Stream(fa, d), Stream(fb, d)
        self.rab, self.rba = Relation(d, window), Relation(d, window)
        self.fc = nn.ModuleList([nn.Linear(d, fc), nn.Linear(fc, fc), nn.Linear(fc, classes)])

    def forward(self, a, b):
        a1, b1 = self.sa(a), self.sb(b)
        zab, zba = self.rab(a1, b1), self.rba(b1, a1)
        y = (zab.mean(1) + zba.mean(1)) / 2  # average fusion of the pooled streams
        y = torch.relu(self.fc[0](y))
        y = torch.relu(self.fc[1](y))
        return self.fc[2](y)


def _links(module):
    """spec parameter -> (torch parameter, factor): spec value = factor · torch value (the gradients: 1 / factor)."""
    out = {}
    for s, t in (("a", "sa"), ("b", "sb")):
        out |= {f"h{s}.weight_ih_l0": (f"{t}.u.weight", 1), f"h{s}.weight_hh_l0": (f"{t}.v.weight", 1),
                f"h{s}.bias_ih_l0": (f"{t}.b_h", 1), f"{s}1.psi.weight": (f"{t}.w.weight", 1),
                f"{s}1.bias": (f"{t}.w.bias", 1)}
    for s, t in (("zab", "rab"), ("zba", "rba")):
        out |= {f"{s}.z.heads.g.xi_instance.w_q": (f"{t}.w_q", 1), f"{s}.z.heads.g.xi_instance.w_k": (f"{t}.w_k", 1),
                f"{s}.z.heads.g.psi.weight": (f"{t}.w_v", 1), f"{s}.z.fusion.linear.weight": (f"{t}.w_t.weight", 1)}
    for s, i in (("f1", 0), ("f2", 1), ("y", 2)):
        out |= {f"{s}.psi.weight": (f"fc.{i}.weight", 0.5 if i == 0 else 1), f"{s}.bias": (f"fc.{i}.bias", 1)}
    return out


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_drrt_equals_the_seed_equations(reference):
    torch.manual_seed(0)
    module = DRRT().double()
    model = rpn2c.compile_file(SPEC, reference=reference).double()
    theirs = dict(module.named_parameters())
    links = _links(module)
    state = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}  # bias_hh: the seed has one b_h
    state |= {k: theirs[t].detach() * f for k, (t, f) in links.items()}
    model.load_state_dict(state, strict=True)
    assert set(state) == set(links) | {"ha.bias_hh_l0", "hb.bias_hh_l0"}
    a, b = _rand(3, 6, 5), _rand(3, 5, 3, seed=1)  # N = 6 and M = 5 items
    want, got = module(a, b), model(a, b)
    assert_close(got, want)
    w = _rand(*want.shape, seed=7)
    (want * w).sum().backward()
    (got * w).sum().backward()
    mine = dict(model.named_parameters())
    for k, (t, f) in links.items():
        assert_close(mine[k].grad * f, theirs[t].grad, msg=f"gradient of {k}")
    for s in ("a", "b"):  # b_h = bias_ih + bias_hh: both receive b_h's gradient
        assert_close(mine[f"h{s}.bias_hh_l0"].grad, theirs[f"s{s}.b_h"].grad)


def test_drrt_counts_the_tied_local_relation_once():
    """Both relation maps of a direction share W_q, W_k and W_ṽ: the spec has the torch module's parameter count
    plus the second RNN bias per stream."""
    module = DRRT()
    graph = rpn2c.check_file(SPEC)
    extra = 2 * 8  # bias_hh per stream
    assert graph.param_count == sum(p.numel() for p in module.parameters()) + extra
    model = rpn2c.compile_file(SPEC)
    assert sum(p.numel() for p in model.parameters()) == graph.param_count
    assert not any(".heads.l." in k for k in model.state_dict())


def test_drrt_header_states_the_inferred_shapes():
    text = SPEC.read_text(encoding="utf-8")
    assert text.startswith("# drrt.rpn - ") and len(text.splitlines()) <= 45
    have = {n.id: str(n.type) for n in rpn2c.check_file(SPEC).nodes()}
    want = header_shapes(text)
    assert want and all(have.get(k) == v for k, v in want.items()), (want, have)
