"""Hyper-parameter expressions beyond + - * / //: ``%``, ``**``, a list's items (``depths[k]``), ``min``/``max``,
``len``, and ``repeat(n, index = i)`` whose instances read their number. Each evaluates as Python does on the same
numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rpn2c


def _widths(spec: str, params: dict | None = None) -> list[int]:
    """The output width of each head of the checked model, in graph order."""
    graph = rpn2c.check(spec, "<test>", params=params)
    return [n.type.shape[-1] for n in graph.nodes() if n.kind == "layer"]


def _each(exprs: list[str], **params) -> list[int]:
    """The widths of a chain of heads, head j of width ``exprs[j]`` (one check for them all)."""
    head = ", ".join(f"{k} = {v}" for k, v in params.items())
    body = "".join(f" y{j + 1} = head(y{j}) {{ out = {e} }}\n" for j, e in enumerate(exprs))
    return _widths(f"model m({head}) {{\n input y0: vector[B, 2]\n{body} return y{len(exprs)}\n}}")


@given(st.integers(1, 60), st.integers(1, 9), st.lists(st.integers(1, 50), min_size=1, max_size=5), st.data())
def test_modulo_items_min_and_max_evaluate_as_python(a, b, xs, data):
    k = data.draw(st.integers(-len(xs), len(xs) - 1))
    got = _each(["a % b + 1", "xs[k]", "min(a, xs[0]) + max(b, xs[-1])", "[[a, b], xs][1][k] * 2", "-xs[0] % 7 + 1",
                 "b * 2 ** (a % 5) + len(xs)", "-2 ** 2 + 2 ** 2 ** 2 - 11"], a=a, b=b, xs=xs, k=k)
    assert got == [a % b + 1, xs[k], min(a, xs[0]) + max(b, xs[-1]), xs[k] * 2, -xs[0] % 7 + 1,
                   b * 2 ** (a % 5) + len(xs), -2 ** 2 + 2 ** 2 ** 2 - 11]


@pytest.mark.parametrize("expr, code", [("2 ** 10 ** 17", "E0314"), ("(-8) ** 0.5", "E0314"), ("0 ** -1", "E0307"),
                                        ("a % 0", "E0307"), ("len(a)", "E0359"), ("len([1], [2])", "E0359")])
def test_arithmetic_that_has_no_value_is_a_located_error(expr, code):
    with pytest.raises(rpn2c.SpecError, match=code):
        _each([expr], a=3)


BLOCKS = """
block lin(d) {
  input x
  y = head(x) { out = d }
  return y
}
"""


@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.integers(1, 5))
def test_each_repeated_instance_reads_its_number(widths, step):
    """Instance i of ``repeat(n, index = i)`` gets ``widths[i] + i % 2 * step``: the Swin pattern of a per-stage
    list and a shift every other block."""
    spec = BLOCKS + (f"model m(widths = {widths}, step = {step}) {{\n  input x: vector[B, 3]\n"
                     f"  y = repeat({len(widths)}, index = i) lin(x, d = widths[i] + i % 2 * step)\n  return y\n}}")
    assert _widths(spec) == [w + i % 2 * step for i, w in enumerate(widths)]


def test_the_index_is_visible_only_to_the_repeated_call():
    spec = BLOCKS + """model m {
  input x: vector[B, 3]
  y = repeat(2, index = i) lin(x, d = 4 + i)
  z = head(y) { out = i }
  return z
}"""
    with pytest.raises(rpn2c.SpecError, match=r"E0202.*unknown name 'i'|unknown name 'i'"):
        rpn2c.check(spec, "<test>")


def test_a_tied_repeat_with_an_index_still_ties_every_instance():
    spec = BLOCKS + """model m {
  input x: vector[B, 3]
  y = repeat(3, tie = true, index = i) lin(x, d = 3 + 0 * i)
  return y
}"""
    model = rpn2c.compile(spec, "<test>")
    assert sum(p.numel() for p in model.parameters()) == 12  # one 3 x 3 map and its bias
