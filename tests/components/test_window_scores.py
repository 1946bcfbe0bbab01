"""A bilinear ξ's window two ways (docs/semantics.md, "Local window"): ``window_scores = "block"`` (default) blocks
the pairs outside ``|i − j| <= k`` (−inf before the softmax), ``"multiply"`` is seed 002's eq 7 as printed,
``Ψ^r = R ⊙ Ψ`` (a pair outside scores 0 and stays in the softmax). Both against torch written from the equations,
in float64, in both lowerings; the packed heads and a masked, causal variant."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from tests.test_lowering_equivalence import _rand, assert_equivalent

N, M, F, R, K = 6, 5, 4, 3, 1


def _spec(scores: str, extra: str = "") -> str:
    return (f"model r {{ input x: sequence[B, {N}, {F}] input c: sequence[B, {M}, {F}] "
            f'a = relation(x, c, xi = attention(rank = {R}, window = {K}, window_scores = "{scores}"{extra})) '
            "return a }")


def _by_hand(model, x, c, scores, scale=1 / math.sqrt(R)):
    """softmax_j of the band-limited scores: R ⊙ Ψ (eq 7 literally) or Ψ with the outside blocked."""
    psi = (x @ model.a.xi.w_q) @ (c @ model.a.xi.w_k).transpose(1, 2) * scale
    band = (torch.arange(N)[:, None] - torch.arange(M)).abs() <= K
    if scores == "multiply":
        return torch.softmax(psi * band, dim=-1)
    return torch.softmax(psi.masked_fill(~band, -math.inf), dim=-1)


@pytest.mark.parametrize("scores", ["multiply", "block"])
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_relation_map_equals_the_equation(scores, reference):
    torch.manual_seed(0)
    model = rpn2c.compile(_spec(scores), reference=reference).double()
    x, c = _rand(2, N, F), _rand(2, M, F, seed=4)
    got = model(x=x, c=c)
    assert_close(got, _by_hand(model, x, c, scores), rtol=1e-12, atol=1e-12)
    band = (torch.arange(N)[:, None] - torch.arange(M)).abs() <= K
    if scores == "multiply":  # outside the band every pair weighs e^0 / Σ: positive, and equal within a row
        out = got[:, ~band]
        assert (out > 0).all()
        row = got[0, 0, ~band[0]]
        assert_close(row, row[:1].expand_as(row))
    else:
        assert (got[:, ~band] == 0).all()


def test_the_two_readings_differ():
    torch.manual_seed(0)
    literal = rpn2c.compile(_spec("multiply"), reference=True).double()
    blocked = rpn2c.compile(_spec("block"), reference=True).double()
    blocked.load_state_dict(literal.state_dict())
    x, c = _rand(2, N, F), _rand(2, M, F, seed=4)
    assert (literal(x=x, c=c) - blocked(x=x, c=c)).abs().max() > 0.05


@pytest.mark.parametrize("text", [
    # packed heads: one attention call over both heads
    f"model h {{ input x: sequence[B, {N}, {F}] y = head(x) {{ heads = 2  xi_instance = attention(rank = 2, "
    f'window = 1, window_scores = "multiply")  out = 3  fusion = concat_linear(out = 4) }} return y }}',
    # a causal window with a key-padding mask: causal and padding stay blocked, the window multiplies
    f"model h {{ input x: sequence[B, {N}, {F}] input pad: block_mask[B, {N}] y = head(x) {{ xi_instance = "
    f'attention(rank = 2, window = 2, causal = true, window_scores = "multiply", key_padding = pad)  out = 3 }} '
    "return y }",
])
def test_default_equals_reference(text):
    inputs = {"x": _rand(2, N, F)}
    if "pad" in text:
        inputs["pad"] = torch.tensor([[False] * N, [False] * (N - 2) + [True] * 2])
    assert_equivalent(text, inputs)
