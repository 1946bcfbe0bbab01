"""The Hadamard family (seed 003): typed broadcasting of per-sample vectors, and the shipped gating specs.

Broadcasting (docs/semantics.md, "Elementwise operations and broadcasting"): ``add``/``mul``/``sub`` of a grid
``[B, C, *S]`` or items ``[B, N, F]`` with vectors ``[B, C]`` / ``[B, F]`` equal torch's broadcasting of the
vector viewed as ``[B, C, 1, ...]`` / ``[B, 1, F]``, in both lowerings, outputs and gradients, in float64.
Each spec in ``examples/specs/`` (squeeze-and-excitation, FiLM, GLU, GEGLU, SwiGLU, Π-net CCP and NCP, highway) equals a
hand-written torch module with the same weights: outputs and parameter gradients, both lowerings. (Highway is the
survey's convex gate R ⊙ A + (1 − R) ⊙ B.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

import rpn2c
from tests.test_specs import header_shapes

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _compile(text, reference=False):
    return rpn2c.compile(text, reference=reference).double().eval()


# ------------------------------------------------------------------------------------------------ broadcasting
@st.composite
def _broadcast_case(draw):
    """A wide operand (grid of rank 1-3 or items), 1-2 vectors and 0-1 more wide operands in a random order."""
    layout = draw(st.sampled_from(["signal", "image", "volume", "sequence", "nodes"]))
    b, c = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    if layout in ("sequence", "nodes"):
        wide = [b, draw(st.integers(1, 5)), c]
    else:
        rank = {"signal": 1, "image": 2, "volume": 3}[layout]
        wide = [b, c, *draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))]
    op = draw(st.sampled_from(["add", "mul", "sub"]))
    if op == "sub":  # a − b: exactly two operands
        kinds = ["wide", "vector"]
    else:
        kinds = ["wide"] + ["vector"] * draw(st.integers(1, 2)) + ["wide"] * draw(st.integers(0, 1))
    kinds = draw(st.permutations(kinds))
    symbolic = draw(st.booleans())  # B (and the item count) symbolic or literal in the declared types
    return layout, wide, kinds, op, symbolic


def _broadcast_spec(layout, wide, kinds, op, symbolic):
    dims = [str(d) for d in wide]
    if symbolic:
        dims[0] = "B"
        if layout in ("sequence", "nodes"):
            dims[1] = "N"
    feat = wide[1] if layout not in ("sequence", "nodes") else wide[-1]
    lines = [f"input a{i}: " + (f"{layout}[{', '.join(dims)}]" if k == "wide" else f"vector[{dims[0]}, {feat}]")
             for i, k in enumerate(kinds)]
    args = ", ".join(f"a{i}" for i in range(len(kinds)))
    return "model m {\n  " + "\n  ".join([*lines, f"y = {op}({args})", "return y"]) + "\n}\n"


@given(_broadcast_case())
def test_broadcast_equals_torch_broadcasting(case):
    """y = a0 ∘ a1 ∘ ... (∘ = +, ⊙, −) with each vector viewed [B, C, 1, ...] (grid) or [B, 1, F] (items)."""
    layout, wide, kinds, op, symbolic = case
    text = _broadcast_spec(*case)
    items = layout in ("sequence", "nodes")
    feat = wide[-1] if items else wide[1]
    graph = rpn2c.check(text)
    wide_type = next(str(graph.node(f"a{i}").type) for i, k in enumerate(kinds) if k == "wide")
    assert str(graph.node("y").type) == wide_type
    xs = [_rand(*(wide if k == "wide" else (wide[0], feat)), seed=i).requires_grad_() for i, k in enumerate(kinds)]
    lifted = [x if k == "wide" else (x[:, None, :] if items else x.reshape(*x.shape, *[1] * (len(wide) - 2)))
              for x, k in zip(xs, kinds)]
    want = lifted[0]
    for x in lifted[1:]:
        want = {"add": torch.add, "mul": torch.mul, "sub": torch.sub}[op](want, x)
    w = _rand(*wide, seed=99)
    want_grads = torch.autograd.grad((want * w).sum(), xs)
    for reference in (False, True):
        got = _compile(text, reference)(*xs)
        assert got.shape == want.shape
        assert_close(got, want)
        for g, h in zip(torch.autograd.grad((got * w).sum(), xs), want_grads):
            assert_close(g, h)


def test_equal_shapes_keep_their_behaviour():
    """Operands of one type: plain elementwise sum and product of the same layout (vectors included)."""
    text = "model m {\n  input a: vector[B, 3]\n  input b: vector[B, 3]\n  s = add(a, b, a)\n  p = mul(a, b)\n" \
           "  return s, p\n}\n"
    a, b = _rand(2, 3), _rand(2, 3, seed=1)
    s, p = _compile(text)(a, b)
    assert_close(s, 2 * a + b)
    assert_close(p, a * b)


def test_single_graph_nodes_take_a_vector_pooled_from_them():
    """nodes[N, F] has the implicit sample axis 1; pooling it gives vector[1, F], which scales its features."""
    text = ("model m {\n  input x: nodes[N, 4]\n  s = pool_items(x, how = \"mean\")\n  y = mul(x, s)\n"
            "  return y\n}\n")
    graph = rpn2c.check(text)
    assert str(graph.node("y").type) == "nodes[N, 4]"
    x = _rand(5, 4)
    assert_close(_compile(text)(x), x * x.mean(0))


@pytest.mark.parametrize("wide, vector, op, at, needs", [
    ("image[B, 16, 4, 4]", "vector[B, 8]", "mul(x, v)", "4:14", "per channel, so it needs vector[B, 16]"),
    ("sequence[B, T, 6]", "vector[B, 4]", "add(v, x)", "4:11", "per feature, so it needs vector[B, 6]"),
    ("image[B, 3, 4, 4]", "vector[1, 3]", "mul(x, v)", "4:14", "needs vector[B, 3]; argument 2 is vector[1, 3]"),
    ("nodes[N, 3]", "vector[B, 3]", "mul(x, v)", "4:14", "needs vector[1, 3]"),
    ("image[B, 3, 4, 4]", "sequence[B, 16, 3]", "mul(x, v)", "4:7", "needs equal shapes"),  # no vector: the call
])
def test_width_disagreement_is_a_located_error(wide, vector, op, at, needs):
    text = f"model m {{\n  input x: {wide}\n  input v: {vector}\n  y = {op}\n  return y\n}}\n"
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(text, "m.rpn")
    [d] = err.value.diagnostics
    assert d.code == "E0403" and f"{d.span.line}:{d.span.col}" == at
    assert needs in d.message
    assert f"m.rpn:{at}" in err.value.render()


def test_vector_of_another_width_never_broadcasts_over_a_vector():
    with pytest.raises(rpn2c.SpecError, match="the feature axis equal.*feature is 3 against 1"):
        rpn2c.check("model m {\n  input a: vector[B, 3]\n  input b: vector[B, 1]\n  y = mul(a, b)\n  return y\n}\n")


# ------------------------------------------------------------------------------------------------ shipped specs
class SqueezeExcitation(nn.Module):
    def __init__(self, c, r):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(c, r), nn.Linear(r, c)

    def forward(self, x):
        g = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3))))))
        return x * g[:, :, None, None]


class FiLM(nn.Module):
    def __init__(self, f, cond):
        super().__init__()
        self.gamma, self.beta = nn.Linear(cond, f), nn.Linear(cond, f)

    def forward(self, x, z):
        return self.gamma(z)[:, None, :] * x + self.beta(z)[:, None, :]


class GatedLinearUnit(nn.Module):
    def __init__(self, d, h, act):
        super().__init__()
        self.w, self.v, self.act = nn.Linear(d, h), nn.Linear(d, h), act

    def forward(self, x):
        return self.w(x) * self.act(self.v(x))


class CCP(nn.Module):
    """Π-net CCP (the survey's S.2.2 code): x₁ = U₁z, x_n = (U_n z) ⊙ x_{n−1} + x_{n−1}, y = C x_N + β."""

    def __init__(self, d, k, o, degree=3):
        super().__init__()
        self.u = nn.ModuleList(nn.Linear(d, k, bias=False) for _ in range(degree))
        self.c = nn.Linear(k, o)

    def forward(self, z):
        x = self.u[0](z)
        for u in self.u[1:]:
            x = u(z) * x + x
        return self.c(x)


class _Vector(nn.Module):
    """An input-free learnable vector (NCP's b₁): the compiled spec holds it as the bias of a psi = zero head."""

    weight = None

    def __init__(self, k):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(k))


class NCP(nn.Module):
    """Π-net NCP (the survey's eq. NCP): x₁ = (A₁z) ⊙ b₁, x_n = (A_n z) ⊙ (S_n x_{n−1} + b_n), y = C x_N + β."""

    def __init__(self, d, k, o, degree=3):
        super().__init__()
        self.a = nn.ModuleList(nn.Linear(d, k, bias=False) for _ in range(degree))
        self.s = nn.ModuleList(nn.Linear(k, k) for _ in range(degree - 1))  # S_n x + b_n
        self.b1 = _Vector(k)
        self.c = nn.Linear(k, o)

    def forward(self, z):
        x = self.a[0](z) * self.b1.bias
        for a, s in zip(self.a[1:], self.s):
            x = a(z) * s(x)
        return self.c(x)


class Highway(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.h, self.t = nn.Linear(f, f), nn.Linear(f, f)

    def forward(self, x):
        t = torch.sigmoid(self.t(x))
        return torch.relu(self.h(x)) * t + x * (1 - t)


def _glu(act):
    return lambda: GatedLinearUnit(8, 16, act)


# spec, torch module, {spec head: torch linear}, inputs
CASES = {
    "se_block": (lambda: SqueezeExcitation(16, 4), {"h": "fc1", "g": "fc2"}, [(2, 16, 5, 3)]),
    "film": (lambda: FiLM(8, 4), {"gamma": "gamma", "beta": "beta"}, [(3, 5, 8), (3, 4)]),
    "glu": (_glu(torch.sigmoid), {"a": "w", "g": "v"}, [(2, 5, 8)]),
    "geglu": (_glu(F.gelu), {"a": "w", "g": "v"}, [(2, 5, 8)]),
    "swiglu": (_glu(F.silu), {"a": "w", "g": "v"}, [(2, 5, 8)]),
    "ccp": (lambda: CCP(8, 16, 4), {"x1": "u.0", "u2": "u.1", "u3": "u.2", "y": "c"}, [(3, 8)]),
    "ncp": (lambda: NCP(8, 16, 4), {"a1": "a.0", "a2": "a.1", "a3": "a.2", "b1": "b1", "s2": "s.0", "s3": "s.1",
                                    "y": "c"}, [(3, 8)]),
    "highway": (lambda: Highway(8), {"h": "h", "t": "t"}, [(3, 8)]),
}


def _copy_weights(model, module, links):
    """The torch module's weights into the compiled model: head ``h`` = ``nn.Linear`` (ψ = weight, bias); a module
    without a weight is a psi = zero head (its bias only)."""
    state = {}
    for head, lin in links.items():
        linear = module.get_submodule(lin)
        if linear.weight is not None:
            state[f"{head}.psi.weight"] = linear.weight.detach().clone()
        if linear.bias is not None:
            state[f"{head}.bias"] = linear.bias.detach().clone()
    model.load_state_dict(state, strict=True)
    return {f"{head}.psi.weight": f"{lin}.weight" for head, lin in links.items()
            if module.get_submodule(lin).weight is not None} | {
        f"{head}.bias": f"{lin}.bias" for head, lin in links.items() if module.get_submodule(lin).bias is not None}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_spec_equals_hand_written_torch(name, reference):
    make, links, shapes = CASES[name]
    torch.manual_seed(0)
    module = make().double()
    model = rpn2c.compile_file(SPECS / f"{name}.rpn", reference=reference).double()
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in module.parameters())
    names = _copy_weights(model, module, links)
    xs = [_rand(*s, seed=i) for i, s in enumerate(shapes)]
    want, got = module(*xs), model(*xs)
    assert_close(got, want)
    w = _rand(*want.shape, seed=7)
    (want * w).sum().backward()
    (got * w).sum().backward()
    theirs = dict(module.named_parameters())
    for mine, p in model.named_parameters():
        assert_close(p.grad, theirs[names[mine]].grad, msg=f"gradient of {mine}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_spec_header_states_formula_and_inferred_shapes(name):
    text = (SPECS / f"{name}.rpn").read_text(encoding="utf-8")
    assert text.startswith(f"# {name}.rpn - ") and len(text.splitlines()) <= 40
    assert any(ln.startswith("#   y = ") or ln.startswith("#   x₁ = ") for ln in text.splitlines()[:4]), "formula"
    have = {n.id: str(n.type) for n in rpn2c.check_file(SPECS / f"{name}.rpn").nodes()}
    want = header_shapes(text)
    assert want and all(have.get(k) == v for k, v in want.items()), (want, have)


@pytest.mark.parametrize("name, degree", [("ccp", 3), ("ncp", 3)])
def test_polynomial_degree(name, degree):
    """Degree exactly N: along a ray z = t·u the output's (N+1)-th finite difference is 0, its N-th is not."""
    torch.manual_seed(0)
    model = rpn2c.compile_file(SPECS / f"{name}.rpn").double()
    with torch.no_grad():
        for p in model.parameters():  # nonzero biases: the zero-initialised b_n would lower NCP's degree
            p.copy_(torch.randn_like(p))
    u = _rand(1, 8)
    ys = torch.stack([model(t * u) for t in torch.arange(degree + 3, dtype=torch.float64)])
    top, past = ys.diff(n=degree, dim=0), ys.diff(n=degree + 1, dim=0)
    assert_close(past, torch.zeros_like(past), atol=1e-6 * top.abs().max().item(), rtol=0)
    assert top.abs().max() > 1e-6


def test_se_gate_is_per_channel():
    """y / x is one sigmoid gate value in (0, 1) per (sample, channel), constant over the grid."""
    torch.manual_seed(0)
    model = rpn2c.compile_file(SPECS / "se_block.rpn").double()
    x = _rand(2, 16, 4, 4)
    y = model(x)
    ratio = y / x
    assert_close(ratio, ratio[:, :, :1, :1].expand_as(ratio))  # one gate value per (sample, channel)
    assert ((ratio > 0) & (ratio < 1)).all()  # a sigmoid gate
