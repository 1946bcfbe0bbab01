"""Tying across nodes (``tie = c1``, block calls, ``repeat(n, tie = true)``), ψ read from another node
(``psi = tied(src)``) and free parameters (``param``): one tensor per tied weight, counted once, gradients summed,
both lowerings equal to hand-written torch in float64."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.errors import SpecError
from rpn2c.syntax.format import format_program
from rpn2c.syntax.parser import parse

LOWERINGS = pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])

CHAIN = """model m {
  input x: vector[B, 4]
  a = head(x) { out = 4  post = [tanh] }
  b = head(a) { out = 4  post = [tanh]  tie = a }
  return b
}"""


def _n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@LOWERINGS
def test_tied_layers_compute_with_one_weight_and_sum_its_gradients(reference):
    torch.manual_seed(0)
    model = rpn2c.compile(CHAIN, reference=reference).double()
    assert rpn2c.check(CHAIN).param_count == _n_params(model) == 20
    assert model.b.psi.weight is model.a.psi.weight and model.b.bias is model.a.bias
    w = model.a.psi.weight.detach().clone().requires_grad_()
    bias = model.a.bias.detach().clone().requires_grad_()
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    want = torch.tanh(torch.tanh(x @ w.T + bias) @ w.T + bias)
    got = model(x)
    assert_close(got, want)
    (want ** 2).sum().backward()
    x2 = x.detach().clone().requires_grad_()
    (model(x2) ** 2).sum().backward()
    assert_close(model.a.psi.weight.grad, w.grad)  # the sum over both uses, in one tensor
    assert_close(x2.grad, x.grad)


def test_ties_survive_conversion_and_loading():
    model = rpn2c.compile(CHAIN).double()
    assert model.b.psi.weight is model.a.psi.weight
    state = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    state["b.psi.weight"] = state["a.psi.weight"]
    state["b.bias"] = state["a.bias"]
    model.load_state_dict(state, assign=True)
    assert model.b.psi.weight is model.a.psi.weight
    assert_close(model.a.psi.weight, state["a.psi.weight"])
    model.float()
    assert model.b.psi.weight is model.a.psi.weight and model.a.psi.weight.dtype == torch.float32


BLOCKS = """block enc(d = 4) {
  input x
  a = head(x) { out = d  post = [relu] }
  b = head(a) { out = d  pi = identity }
  return b
}
model m {
  input x: vector[B, 4]
  y = repeat(3, tie = true) enc(x)
  z = enc(y, tie = y)
  u = enc(z)
  return u
}"""


@LOWERINGS
def test_repeat_and_block_ties_share_the_first_instance(reference):
    torch.manual_seed(1)
    model = rpn2c.compile(BLOCKS, reference=reference).double()
    assert rpn2c.check(BLOCKS).param_count == _n_params(model) == 2 * 40  # y.0 (z and y.1..2 tied), u
    for other in ("y.1", "y.2", "z"):
        assert model.get_submodule(f"{other}.a").psi.weight is model.get_submodule("y.0.a").psi.weight
    assert model.u.a.psi.weight is not model.get_submodule("y.0.a").psi.weight
    w = {k: v.detach() for k, v in model.state_dict().items()}

    def block(x, p):
        h = torch.relu(x @ w[f"{p}.a.psi.weight"].T + w[f"{p}.a.bias"])
        return h @ w[f"{p}.b.psi.weight"].T + w[f"{p}.b.bias"] + h  # π adds b's own input

    x = torch.randn(6, 4, dtype=torch.float64)
    want = x
    for _ in range(4):
        want = block(want, "y.0")
    assert_close(model(x), block(want, "u"))


AUTOENCODER = """model m {
  input x: tokens[B, 5]
  e = embedding(x, vocab = 7, dim = 3)
  enc = head(e) { out = 4 }
  dec = head(enc) { psi = tied(enc, transpose = true)  out = 3 }
  y = head(dec) { psi = tied(e)  out = 7  bias = false }
  return y
}"""


@LOWERINGS
def test_tied_psi_reads_the_source_matrix_and_its_transpose(reference):
    torch.manual_seed(2)
    model = rpn2c.compile(AUTOENCODER, reference=reference).double()
    assert rpn2c.check(AUTOENCODER).param_count == _n_params(model) == 7 * 3 + 3 * 4 + 4 + 3
    assert set(model.state_dict()) == {"e.weight", "enc.psi.weight", "enc.bias", "dec.bias"}
    E = model.e.weight.detach().clone().requires_grad_()
    W = model.enc.psi.weight.detach().clone().requires_grad_()
    b, c = model.enc.bias.detach(), model.dec.bias.detach()
    x = torch.randint(0, 7, (2, 5))
    want = ((E[x] @ W.T + b) @ W + c) @ E.T
    assert_close(model(x), want)
    want.sum().backward()
    model(x).sum().backward()
    assert_close(model.e.weight.grad, E.grad)
    assert_close(model.enc.psi.weight.grad, W.grad)


PARAMS = """model m {
  input x: sequence[B, 5, 4]
  param pos: sequence[1, 5, 4] = normal(std = 0.02)
  param cls: sequence[1, 1, 4]
  param gamma: sequence[1, 1, 4] = constant(value = 0.5)
  p = add(x, pos)
  c = concat_items(cls, p)
  h = head(c) { out = 4 }
  y = mul(h, gamma)
  return y
}"""


@LOWERINGS
def test_free_parameters_are_learnable_values(reference):
    torch.manual_seed(3)
    model = rpn2c.compile(PARAMS, reference=reference).double()
    assert rpn2c.check(PARAMS).param_count == _n_params(model) == 20 + 4 + 4 + 20
    assert_close(model.gamma.value, torch.full((1, 1, 4), 0.5, dtype=torch.float64))
    assert torch.count_nonzero(model.cls.value) == 0 and 0 < model.pos.value.std() < 0.1
    with torch.no_grad():
        model.cls.value.normal_()
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    s = {k: v.detach() for k, v in model.state_dict().items()}
    seq = torch.cat([s["cls.value"].expand(3, 1, 4), x + s["pos.value"]], dim=1)
    assert_close(model(x), (seq @ s["h.psi.weight"].T + s["h.bias"]) * s["gamma.value"])
    model(x).sum().backward()
    assert model.cls.value.grad is not None and model.pos.value.grad.abs().sum() > 0


def test_the_new_forms_format_canonically():
    for text in (PARAMS, BLOCKS, AUTOENCODER):
        once = _fmt(text)
        assert _fmt(once) == once
        assert rpn2c.check(once).canonical() == rpn2c.check(text).canonical()
    assert "repeat(3, tie = true) enc(x)" in _fmt(BLOCKS)
    assert "param gamma: sequence[1, 1, 4] = constant(value = 0.5)" in _fmt(PARAMS)


def _fmt(text: str) -> str:
    return format_program(parse(text))


def _error(text: str) -> str:
    with pytest.raises(SpecError) as err:
        rpn2c.check(text)
    return str(err.value)


@pytest.mark.parametrize("body, code, words", [
    ("a = head(x) { out = 4 }\n  b = head(a) { out = 3  tie = a }", "E0402", "differ"),
    ("a = head(x) { out = 4 }\n  b = head(a) { out = 4  tie = c }", "E0202", "names no earlier value"),
    ("a = head(x) { out = 4 }\n  b = head(a) { out = 4  tie = 2 }", "E0303", "name of an earlier"),
    ("a = relu(x)\n  b = head(a) { out = 4  tie = a }", "E0402", "no parameters"),
    ("a = head(x) { out = 4 }\n  b = head(a) { out = 5  psi = tied(a) }", "E0402", "4 x 4"),
    ("a = head(x) { out = 4  psi = low_rank(r = 1) }\n  b = head(a) { out = 4  psi = tied(a) }", "E0402",
     "one weight matrix"),
    ("param p: vector[B, 4]\n  b = add(x, p)", "E0309", "symbol"),
    ("param p: vector[2, 4]\n  b = add(x, p)", "E0403", "first (sample) axis is 1"),
    ("param p: vector[1, 4] = gaussian\n  b = add(x, p)", "E0303", "init"),
    ("param p: tokens[1, 4]\n  b = add(x, p)", "E0303", "holds features"),
    ("y = repeat(2, tie = 1) blk(x)", "E0303", "true or false"),
    ("y = blk(x, tie = x)", "E0303", "block call"),
])
def test_bad_ties_and_parameters_are_located_errors(body, code, words):
    text = ("block blk {\n  input x\n  a = head(x) { out = 4 }\n  return a\n}\nmodel m {\n  input x: vector[B, 4]\n  "
            + body + "\n  return " + body.split("\n")[-1].split("=")[0].strip() + "\n}")
    message = _error(text)
    assert f"error[{code}]" in message and words in message, message


@pytest.mark.parametrize("slot, call", [
    ("xi_instance_prior", "graph_attention(edges = e, rank = 3, share_psi = true)"),
    ("xi_instance", 'hybrid(parts = ["graph_attention", "graph"], edges = e, p1_rank = 3, p1_share_psi = true)'),
])
def test_share_psi_outside_the_heads_own_instance_slot_is_a_located_error(slot, call):
    """GAT's one projection is the head's ψ: a graph_attention reading it anywhere else would have no ψ to read."""
    text = (f"model m {{\n  input x: nodes[5, 4]\n  input e: edges[2, 6]\n  y = head(x) {{\n    {slot} = {call}\n"
            "    out = 3\n  }\n  return y\n}\n")
    message = _error(text)
    assert "error[E0402]" in message and "share_psi" in message, message
