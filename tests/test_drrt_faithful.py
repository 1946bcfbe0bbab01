"""DRRT (seed 002) as ``examples/specs/drrt.rpn``, against a torch module written from the seed's equations.

The torch module: eq. 1–2 (an Elman recurrence per stream, A'_t = tanh(W_A' h_t + c)); one bilinear score
Ψ_ij = (a'_i W_a')·(b'_j W_b') (eq. 5, bilinear reading); α^g = softmax_j(Ψ/√d), β^g = softmax_i(Ψ/√d) (eq. 3–4);
α^r = softmax_j(Ψ masked to the region |i − j| <= window)/C_r with C_r = Σ R/√d, β^r likewise over i (eq. 6–9);
the local recurrence of eq. 1–2 over the rows of α^g, α^r and of (β^g)ᵀ, (β^r)ᵀ (§3); eq. 10–15 with the
concatenation fusion and ONE W_t for both directions; average fusion and a 3-layer classifier. Equal in float64,
outputs and every parameter's gradient, in both lowerings, with the torch weights copied across.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import rpn2c

SPEC = Path(__file__).resolve().parents[1] / "examples" / "specs" / "drrt.rpn"
N, M, FA, FB, D, WINDOW, K, FC, CLASSES = 6, 5, 5, 3, 8, 1, 4, 16, 2


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


class LocalRNN(nn.Module):
    """Eq. 1–2: h_t = tanh(U x_t + V h_{t−1} + b_h), y_t = tanh(W h_t + c) (c: eq. 2's own bias)."""

    def __init__(self, f, h, out):
        super().__init__()
        self.u, self.v, self.w = nn.Linear(f, h, bias=False), nn.Linear(h, h, bias=False), nn.Linear(h, out)
        self.b_h = nn.Parameter(torch.randn(h))

    def forward(self, x):
        h = x.new_zeros(x.shape[0], self.v.in_features)
        states = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.u(x[:, t]) + self.v(h) + self.b_h)
            states.append(h)
        return torch.tanh(self.w(torch.stack(states, 1)))


def region(n, m, window):
    """R_ij = 1 for the region pairs |i − j| <= window (eq. 8)."""
    i, j = torch.arange(n).unsqueeze(-1), torch.arange(m)
    return (i - j).abs() <= window


class DRRT(nn.Module):
    """``literal``: eq. 7 as printed, Ψ^r = R ⊙ Ψ (a pair outside the region scores 0 and stays in the softmax);
    otherwise the pairs outside the region are blocked (−inf: weight 0, the spec's default)."""

    def __init__(self, literal=False, fusion="concat"):
        super().__init__()
        self.literal, self.fusion = literal, fusion
        self.sa, self.sb = LocalRNN(FA, D, D), LocalRNN(FB, D, D)
        self.w_a, self.w_b = (nn.Parameter(torch.randn(D, D) / math.sqrt(D)) for _ in range(2))  # W_a', W_b'
        self.maps = nn.ModuleDict({"ag": LocalRNN(M, K, M), "ar": LocalRNN(M, K, M),
                                   "bg": LocalRNN(N, K, N), "br": LocalRNN(N, K, N)})
        self.w_bt, self.w_at = (nn.Parameter(torch.randn(D, D) / math.sqrt(D)) for _ in range(2))  # W_b̃', W_ã'
        self.w_t = nn.Linear(2 * D if fusion == "concat" else D, D, bias=False)  # shared by eq. 12 and 13
        self.fc = nn.ModuleList([nn.Linear(D, FC), nn.Linear(FC, FC), nn.Linear(FC, CLASSES)])

    def c_r(self, n, m):
        """Eq. 9: C_r = Σ_ij R_ij / √d (one region pair set)."""
        return region(n, m, WINDOW).sum().item() / math.sqrt(D)

    def forward(self, a, b):
        a1, b1 = self.sa(a), self.sb(b)
        psi = (a1 @ self.w_a) @ (b1 @ self.w_b).transpose(1, 2)  # Ψ [B, n, m]
        n, m = psi.shape[1:]
        outside = ~region(n, m, WINDOW)
        alpha_g = torch.softmax(psi / math.sqrt(D), dim=2)  # eq. 3: over j
        beta_g = torch.softmax(psi / math.sqrt(D), dim=1)  # eq. 4: over i
        psi_r = psi * (~outside) if self.literal else psi.masked_fill(outside, -math.inf)  # eq. 7
        alpha_r = torch.softmax(psi_r, dim=2) / self.c_r(n, m)  # eq. 6
        beta_r = torch.softmax(psi_r, dim=1) / self.c_r(n, m)
        ag, ar = self.maps["ag"](alpha_g), self.maps["ar"](alpha_r)  # §3: recurrence over rows i
        bg, br = self.maps["bg"](beta_g.transpose(1, 2)), self.maps["br"](beta_r.transpose(1, 2))  # over j
        vb, va = b1 @ self.w_bt.T, a1 @ self.w_at.T
        zab = a1 + self.w_t(self.fuse(ag @ vb, ar @ vb))  # eq. 10, 12, 14
        zba = b1 + self.w_t(self.fuse(bg @ va, br @ va))  # eq. 11, 13, 15
        y = (zab.mean(1) + zba.mean(1)) / 2  # average fusion
        y = torch.relu(self.fc[0](y))
        y = torch.relu(self.fc[1](y))
        return self.fc[2](y)


    def fuse(self, t_g, t_r):
        """§3: "sum, maxout or concatenation" of the global and regional representations (eq. 12–13's Fusion)."""
        self.parts = (t_g.detach(), t_r.detach())
        if self.fusion == "sum":
            return t_g + t_r
        if self.fusion == "max":
            return torch.maximum(t_g, t_r)
        return torch.cat([t_g, t_r], -1)


def _rnn_links(spec, t, u_factor=1.0):
    return {f"{spec}.weight_ih_l0": (f"{t}.u.weight", u_factor), f"{spec}.weight_hh_l0": (f"{t}.v.weight", 1),
            f"{spec}.bias_ih_l0": (f"{t}.b_h", 1)}


def links(module: DRRT) -> dict[str, tuple[str, float]]:
    """spec parameter path -> (torch parameter, factor): spec value = factor · torch value (gradients: 1 / factor).
    Tied tensors appear under each of their spec paths."""
    inv_c = 1 / module.c_r(N, M)
    out = {}
    for s, t in (("a", "sa"), ("b", "sb")):
        out |= _rnn_links(f"h{s}", t) | {f"{s}1.psi.weight": (f"{t}.w.weight", 1), f"{s}1.bias": (f"{t}.w.bias", 1)}
    for r, swap in (("ag", False), ("ar", False), ("bg", True), ("br", True)):
        q, k = ("w_b", "w_a") if swap else ("w_a", "w_b")
        out |= {f"{r}.xi.w_q": (q, 1), f"{r}.xi.w_k": (k, 1)}
        out |= _rnn_links(f"{r}1.h", f"maps.{r}", inv_c if r.endswith("r") else 1.0)  # 1/C_r in U
        out |= {f"{r}1.o.psi.weight": (f"maps.{r}.w.weight", 1), f"{r}1.o.bias": (f"maps.{r}.w.bias", 1)}
    out |= {"vb.psi.weight": ("w_bt", 1), "va.psi.weight": ("w_at", 1), "tab.psi.weight": ("w_t.weight", 1),
            "tba.psi.weight": ("w_t.weight", 1)}
    for s, i in (("f1", 0), ("f2", 1), ("y", 2)):
        out |= {f"{s}.psi.weight": (f"fc.{i}.weight", 0.5 if i == 0 else 1), f"{s}.bias": (f"fc.{i}.bias", 1)}
    return out


RNNS = ("ha", "hb", "ag1.h", "ar1.h", "bg1.h", "br1.h")


LITERAL = SPEC.read_text(encoding="utf-8").replace("scale = 1.0)", 'scale = 1.0, window_scores = "multiply")')


@pytest.mark.parametrize("literal", [False, True], ids=["blocked", "literal_eq7"])
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_drrt_equals_the_seed_equations(reference, literal):
    torch.manual_seed(0)
    module = DRRT(literal).double()
    model = (rpn2c.compile(LITERAL, reference=reference) if literal
             else rpn2c.compile_file(SPEC, reference=reference)).double()
    _equal_with_copied_weights(module, model, links(module))


def _equal_with_copied_weights(module, model, link):
    """Copy the torch weights into the spec's (``link``), then equal outputs and every parameter's gradient."""
    theirs = dict(module.named_parameters())
    state = {k: theirs[t].detach() * f for k, (t, f) in link.items()}
    assert set(state) == set(model.state_dict())  # every spec value is one of the seed's, b_h once
    model.load_state_dict(state, strict=True)
    a, b = _rand(3, N, FA), _rand(3, M, FB, seed=1)
    want, got = module(a, b), model(a, b)
    assert_close(got, want)
    w = _rand(*want.shape, seed=7)
    (want * w).sum().backward()
    (got * w).sum().backward()
    for k, p in model.named_parameters():  # each tensor once: a tied one under its first path
        t, f = link[k]
        assert_close(p.grad * f, theirs[t].grad, msg=f"gradient of {k}")


def test_drrt_shares_w_t_and_one_score_pair():
    """W_t is one tensor for both directions; the four maps score with one (W_a', W_b') pair, the β maps with
    its factors swapped; the free parameters are the torch module's, one b_h per recurrence included."""
    graph = rpn2c.check_file(SPEC)
    model = rpn2c.compile_file(SPEC)
    assert model.tba.psi.weight is model.tab.psi.weight
    assert model.ar.xi.w_q is model.ag.xi.w_q and model.ar.xi.w_k is model.ag.xi.w_k
    assert model.bg.xi.w_q is model.ag.xi.w_k and model.bg.xi.w_k is model.ag.xi.w_q
    assert model.br.xi.w_q is model.ag.xi.w_k and model.br.xi.w_k is model.ag.xi.w_q
    assert {graph.node(r).tie for r in ("ar", "bg", "br")} == {"ag"} and graph.node("tba").tie == "tab"
    assert graph.param_count == sum(p.numel() for p in DRRT().parameters())
    assert sum(p.numel() for p in model.parameters()) == graph.param_count
    assert not any(hasattr(model.get_submodule(r), "bias_hh_l0") for r in RNNS)


def test_drrt_maps_are_relations_recurred_over_rows():
    """The spec's relation maps are matrix values, and the recurrence reads their rows (not an identity head)."""
    graph = rpn2c.check_file(SPEC)
    kinds = {n.id: str(n.type) for n in graph.nodes()}
    assert kinds["ag"] == f"matrix[B, {N}, {M}]" and kinds["bg"] == f"matrix[B, {M}, {N}]"
    assert kinds["ag1.r1"] == f"matrix[B, {N}, {M}]" and kinds["ag1.h_rows"] == f"sequence[B, {N}, {M}]"
    assert not any(n.kind == "layer" and "eye" in str(n.layer.canonical()) for n in graph.nodes())


def test_the_literal_eq7_and_the_blocked_softmax_are_different_maps():
    """Eq. 7's R ⊙ Ψ leaves a pair outside the region at score 0, so its softmax still gives it weight e⁰/Σ; the
    blocked softmax gives it none. On the same scores the two regional maps differ (inside and outside the region)."""
    assert LITERAL.count('window_scores = "multiply"') == 2
    torch.manual_seed(0)
    blocked, literal = (rpn2c.compile(text, reference=True).double() for text in (SPEC.read_text("utf-8"), LITERAL))
    literal.load_state_dict(blocked.state_dict())
    a, b = _rand(2, N, FA), _rand(2, M, FB, seed=1)
    maps = {}
    for name, model in (("blocked", blocked), ("literal", literal)):
        a1, b1 = model.a1(model.ha(a)), model.b1(model.hb(b))
        maps[name] = model.ar(a1, b1)
    outside = ~region(N, M, WINDOW)
    assert (maps["blocked"][:, outside] == 0).all() and (maps["literal"][:, outside] > 0).all()
    assert (maps["blocked"] - maps["literal"]).abs().max() > 0.1


_CONCAT = """  vb = head(b1) { out = d  bias = false }
  va = head(a1) { out = d  bias = false }
  tab = head(concat(apply(ag1, vb), apply(ar1, vb))) { out = d  bias = false }
  tba = head(concat(apply(bg1, va), apply(br1, va))) { out = d  bias = false  tie = tab }
"""
_FUSED = """  fab = layer(a1, context = b1) {
    head g { xi_instance = given(ag1)  out = d  bias = false }
    head r { xi_instance = given(ar1)  out = d  bias = false  tie = g }
    fusion = FUSION
  }
  fba = layer(b1, context = a1) {
    head g { xi_instance = given(bg1)  out = d  bias = false }
    head r { xi_instance = given(br1)  out = d  bias = false  tie = g }
    fusion = FUSION
  }
  tab = head(fab) { out = d  bias = false }
  tba = head(fba) { out = d  bias = false  tie = tab }
"""


@pytest.mark.parametrize("fusion", ["sum", "max"])
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_drrt_sum_and_maxout_fusions_equal_the_seed_equations(fusion, reference):
    """Eq. 12–13 with Fusion = sum or maxout: T^g = α'^g B' W_b̃ᵀ and T^r (one head each over the relation maps,
    sharing W_b̃: `tie = g`), fused elementwise by the layer's head fusion, then the one W_t."""
    text = SPEC.read_text(encoding="utf-8")
    assert _CONCAT in text
    text = text.replace(_CONCAT, _FUSED.replace("FUSION", fusion))
    torch.manual_seed(0)
    module = DRRT(fusion=fusion).double()
    model = rpn2c.compile(text, reference=reference).double()
    link = {k: v for k, v in links(module).items() if not k.startswith(("vb.", "va."))}
    link |= {"fab.heads.g.psi.weight": ("w_bt", 1), "fba.heads.g.psi.weight": ("w_at", 1)}
    _equal_with_copied_weights(module, model, link)
    t_g, t_r = module.parts  # the case picks from both parts (a maxout that returned one part would fail)
    assert (t_g > t_r).any() and (t_r > t_g).any()
