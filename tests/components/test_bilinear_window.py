"""A local window on the bilinear / attention ξ: ``window = k`` blocks the pairs with |i − j| > k (with ``causal``:
keeps i − k <= j <= i). No N×N input: the default lowering builds the band from item indices for SDPA, the reference
materialises the band matrix R. Checked against hand-written torch in float64 (outputs and gradients)."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.components.xi_attention import SDPA_CAUSAL
from rpn2c.ir.kernels import offered
from rpn2c.lower.build import CompiledModel
from rpn2c.components.impl import xi_attention as xi_mod
from rpn2c.functional import structure as S
from tests.test_lowering_equivalence import assert_equivalent


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _spec(n, m, window, causal, padding):
    ctx = ", context = mem" if m is not None else ""
    mem = f"  input mem: sequence[B, {m}, 3]\n" if m is not None else ""
    pad = "  input pad: block_mask[B, {}]\n".format(m if m is not None else n) if padding else ""
    extra = ", key_padding = pad" if padding else ""
    return (f"model w {{\n  input x: sequence[B, {n}, 4]\n{mem}{pad}  y = head(x{ctx}) {{\n"
            f"    xi_instance = attention(rank = 2, window = {window}, causal = {str(causal).lower()}{extra})\n"
            f"    out = 3\n  }}\n  return y\n}}\n")


def _torch(model, x, mem, pad, window, causal):
    """softmax over j of (x W_q)(c W_k)ᵀ/√r with the pairs outside |i − j| <= window (and j > i if causal) at −inf."""
    xi = model.y.xi_instance
    c = x if mem is None else mem
    logits = (x @ xi.w_q) @ (c @ xi.w_k).transpose(-1, -2) / math.sqrt(xi.w_q.shape[1])
    n, m = logits.shape[-2:]
    keep = torch.tensor([[abs(i - j) <= window and (j <= i or not causal) for j in range(m)] for i in range(n)])
    if pad is not None:
        keep = keep & ~pad[:, None, :]
    a = torch.softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)
    return a @ c @ model.y.psi.weight.T + model.y.bias


@st.composite
def _case(draw):
    """Every query keeps a key: n <= (keys) + window; the padded key (the last one) is never a row's only key."""
    n = draw(st.integers(1, 7))
    cross = draw(st.booleans())
    m = draw(st.integers(max(1, n - 3), n + 2)) if cross else None
    width = n if m is None else m
    window = draw(st.integers(max(0, n - width), 3))
    causal = draw(st.booleans())
    padding = draw(st.booleans()) and width >= 2 and n < width + window
    return n, m, window, causal, padding


@given(_case())
def test_window_equals_hand_written_masked_softmax(case):
    n, m, window, causal, padding = case
    width = n if m is None else m
    x, mem = _rand(2, n, 4), (None if m is None else _rand(2, m, 3, seed=1))
    inputs = {"x": x} | ({"mem": mem} if mem is not None else {})
    pad = None
    if padding:  # the last key of the second sample is blocked
        pad = torch.zeros(2, width, dtype=torch.bool)
        pad[1, -1] = True
        inputs["pad"] = pad
    text = _spec(n, m, window, causal, padding)
    for reference in (False, True):
        torch.manual_seed(0)
        model = rpn2c.compile(text, reference=reference).double()
        got = model(**inputs)
        want = _torch(model, x, mem, pad, window, causal)
        assert_close(got, want)
        w = _rand(*want.shape, seed=5)
        params = list(model.parameters())
        for a, b in zip(torch.autograd.grad((got * w).sum(), params), torch.autograd.grad((want * w).sum(), params)):
            assert_close(a, b)


def test_window_zero_is_the_diagonal():
    """window = 0 keeps only i = j: every row's softmax is one, the head is ψ applied item by item."""
    text = _spec(5, None, 0, False, False)
    model = rpn2c.compile(text).double()
    x = _rand(2, 5, 4)
    assert_close(model(x), x @ model.y.psi.weight.T + model.y.bias)


def test_query_without_a_key_in_its_window_gets_a_zero_row():
    """5 queries, 2 keys, window 0: queries 2-4 see no key; their attention row is 0 (only the bias is left), in
    both lowerings, with finite gradients."""
    text = _spec(5, 2, 0, False, False)
    fast, ref = (rpn2c.compile(text, reference=r).double() for r in (False, True))
    ref.load_state_dict(fast.state_dict())
    x, mem = _rand(2, 5, 4), _rand(2, 2, 3, seed=1)
    for model in (fast, ref):
        y = model(x, mem)
        assert_close(y[:, 2:], fast.y.bias.expand(2, 3, 3))
        assert_close(y[:, :2], _torch(fast, x[:, :2], mem, None, 0, False))
        grads = torch.autograd.grad(y.sum(), list(model.parameters()))
        assert all(torch.isfinite(g).all() for g in grads)


def test_a_causal_window_is_not_labelled_or_run_as_the_causal_kernel():
    """SDPA's is_causal cannot express a band: the optimiser's causal_sdpa rule declines a windowed causal mask,
    and the causal kernel does not apply to it."""
    text = _spec(6, None, 1, True, False)
    graph = rpn2c.check(text)
    fast = rpn2c.compile(text).double()
    assert "causal_sdpa" not in fast.graph.node("y").plan
    assert "sdpa_causal" not in {t.op for t in fast.graph.node("y").terms[1].walk()}
    x = _rand(2, 6, 4)
    xi = fast.graph.node("y").layer.heads[0].xi["xi_instance"].component
    assert not offered(xi, SDPA_CAUSAL)  # the causal kernel's declared applicability excludes a window
    assert_close(fast(x), _torch(fast, x, None, None, 1, True))
    assert graph.param_count == 4 * 2 + 4 * 2 + 4 * 3 + 3


def test_default_lowering_builds_no_literal_band(monkeypatch):
    """The default lowering's band comes from item indices; only the reference builds the band matrix R."""
    text = _spec(6, 6, 2, False, False)
    monkeypatch.setattr(xi_mod.structure, "band_matrix", lambda *a, **k: pytest.fail("literal band built"))
    rpn2c.compile(text).double()(x=_rand(2, 6, 4), mem=_rand(2, 6, 3, seed=1))


def test_window_in_a_hybrid_part_lowers_equally():
    """A low_rank_bilinear part of a graph hybrid evaluates its window on the edges (the part's own softmax)."""
    edges = torch.tensor([[0, 1, 1, 2, 3, 3, 4], [1, 2, 0, 2, 0, 4, 4]])
    text = ('model g { input x: sequence[B, 5, 3] input edges: edges[2, E] y = head(x) { xi_instance = hybrid('
            'parts = ["graph", "low_rank_bilinear"], edges = edges, rank = 2, window = 1, normalize = "softmax") '
            ' out = 2 } return y }')
    assert_equivalent(text, {"x": _rand(2, 5, 3), "edges": edges})


@pytest.mark.parametrize("value, message", [("-1", "greater than or equal to 0"), ("1.5", "valid integer")])
def test_bad_window_is_a_located_error(value, message):
    text = _spec(4, None, 0, False, False).replace("window = 0", f"window = {value}")
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(text, "w.rpn")
    [d] = err.value.diagnostics
    assert d.code == "E0303" and "window" in d.message and message in d.message
    assert "w.rpn:4:" in err.value.render()


@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 6))
def test_band_matrix_and_index_band_agree(nq, nc, k):
    """The literal band R (reference) is the complement of the pairs the index form blocks (default lowering)."""
    r = S.band_matrix(nq, nc, k)
    assert r.tolist() == [[abs(i - j) <= k for j in range(nc)] for i in range(nq)]
    assert torch.equal(r, ~S.band_blocked(nq, nc, k))


# ------------------------------------------------------------------------------------------------ FlexAttention
def _recorded(model, *inputs):
    """Outputs of ``model`` compiled with a backend that records the call targets of the traced graph."""
    seen = []

    def record(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(model, backend=record, fullgraph=True)(*inputs), seen


@pytest.mark.parametrize("n, m, window, causal", [(800, None, 8, False),
                                                   pytest.param(800, None, 5, True, marks=pytest.mark.slow),
                                                   pytest.param(300, 900, 20, False, marks=pytest.mark.slow)])
def test_flex_window_runs_flexattention_where_the_band_skips_blocks(n, m, window, causal):
    """Rule flex_window: without gradients, on sequences long enough for the band to skip blocks, the band is a
    FlexAttention block mask (the op rpn2c::window_attention, also inside a compiled graph); with gradients, in
    float64 or on short sequences it goes to SDPA as a mask. Every path equals the SDPA one."""
    from rpn2c.functional import flex_op

    text = _spec(n, m, window, causal, False)
    assert "flex_window" in rpn2c.passes.optimize(rpn2c.check(text)).node("y").plan
    model = rpn2c.compile(text).eval()
    plain = CompiledModel(rpn2c.passes.optimize(rpn2c.check(text), disable={"flex_window"})).eval()  # SDPA + band
    plain.load_state_dict(model.state_dict())
    x = _rand(2, n, 4).float()
    inputs = (x,) if m is None else (x, _rand(2, m, 3, seed=1).float())
    calls = []
    real = flex_op.window_attention
    with torch.no_grad(), mock.patch.object(flex_op, "window_attention",
                                            side_effect=lambda *a: calls.append(1) or real(*a)):
        want = plain(*inputs)
        assert_close(model(*inputs), want, rtol=1e-5, atol=1e-6)
        assert calls
    with torch.no_grad():
        got, seen = _recorded(model, *inputs)
    assert "rpn2c.window_attention.default" in seen, seen
    assert_close(got, want, rtol=1e-5, atol=1e-6)
    flex_op._block_mask.cache_clear()  # the first call inside a compiled graph's run builds the block mask and
    flex_op._compiled_flex.cache_clear()  # compiles FlexAttention there (AOT's runtime wrappers are active)
    torch._dynamo.reset()
    with torch.no_grad():
        assert_close(torch.compile(model, backend="aot_eager", fullgraph=True)(*inputs), want, rtol=1e-5, atol=1e-6)
    calls.clear()
    with mock.patch.object(flex_op, "window_attention", side_effect=lambda *a: calls.append(1) or real(*a)):
        assert_close(model(*inputs), want, rtol=1e-5, atol=1e-6)  # gradients on: SDPA (no backward)
        with torch.no_grad():
            model.double()(*(t.double() for t in inputs))  # float64: no CPU kernel
            short = rpn2c.compile(_spec(9, None, 2, causal, False)).eval()
            short(_rand(2, 9, 4).float())  # nine items: one block, nothing to skip
    assert not calls


def test_flex_window_is_worthwhile_only_where_blocks_are_skipped():
    from rpn2c.functional import flex_op

    assert flex_op.worthwhile(4096, 4096, 64) and flex_op.worthwhile(800, 800, 8)
    assert not flex_op.worthwhile(600, 600, 8)  # 3 of 5 key blocks meet each query block
    assert not flex_op.worthwhile(200, 200, 8)  # one or two blocks
    assert not flex_op.worthwhile(1024, 1024, 300)  # the band covers most blocks


@pytest.mark.parametrize("nq, nc, window, causal", [(800, 800, 8, False), (800, 800, 130, True), (300, 900, 20, False),
                                                    (1000, 260, 0, False), (257, 257, 300, True)])
def test_flex_window_block_mask_lists_exactly_the_blocks_the_band_meets(nq, nc, window, causal):
    from rpn2c.functional import flex_op

    mask = flex_op._block_mask(nq, nc, window, causal, "cpu")
    i, j = torch.arange(nq)[:, None], torch.arange(nc)[None, :]
    keep = ((i - j).abs() <= window) & ((j <= i) if causal else True)
    pad = lambda a, n: torch.nn.functional.pad(a, (0, -a.shape[-1] % n, 0, -a.shape[0] % n))  # noqa: E731
    blocks = pad(keep, 128).unflatten(0, (-1, 128)).unflatten(2, (-1, 128)).any(3).any(1)
    assert torch.equal(mask.to_dense()[0, 0].bool(), blocks)


def test_window_attention_falls_back_to_sdpa_where_flexattention_cannot_compile(monkeypatch):
    """Without a compiler toolchain for inductor the op warns once, answers by SDPA with the band, and the rule's
    later calls take SDPA directly."""
    from rpn2c.functional import flex_op

    def broken():
        def fail(*a, **k):
            raise RuntimeError("no C++ compiler")
        return fail

    monkeypatch.setattr(flex_op, "_compiled_flex", broken)
    monkeypatch.setattr(flex_op, "_UNAVAILABLE", [])
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 300, 4, generator=g) for _ in range(3))
    with pytest.warns(RuntimeWarning, match="could not be compiled"):
        got = flex_op.window_attention(q, k, v, 5, True, 0.5)
    i, j = torch.arange(300)[:, None], torch.arange(300)[None, :]
    keep = ((i - j).abs() <= 5) & (j <= i)
    assert_close(got, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.5))
    assert flex_op._UNAVAILABLE and not flex_op.supported(q, k, v)
