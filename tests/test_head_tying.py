"""Heads of a ``layer``: parameter tying (``tie = other``) and per-head processing (``post`` inside ``head name``).

``tie = g`` makes a head compute with head g's parameters (κ, ξ, ψ, bias, channel fusion): one tensor in
``state_dict``, counted once by ``rpn2c check``, its gradient the sum over both uses. A head's own ``post`` runs on
its output before the layer's head fusion. Both against hand-written torch in float64, both lowerings.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import rpn2c

TIED = """model t {
  input x: sequence[B, 6, 4]
  input mem: sequence[B, 5, 3]
  z = layer(x, context = mem) {
    head g {
      xi_instance = attention(rank = 2)
      out = 4
      post = [relu]
    }
    head l {
      tie = g
      xi_instance = attention(rank = 2, window = 1)
      out = 4
    }
    fusion = concat_linear(out = 4)
    pi = identity
  }
  return z
}
"""


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _attend(x, c, w_q, w_k, w_v, b, keep=None):
    logits = (x @ w_q) @ (c @ w_k).transpose(-1, -2) / math.sqrt(w_q.shape[1])
    if keep is not None:
        logits = logits.masked_fill(~keep, float("-inf"))
    return torch.softmax(logits, -1) @ c @ w_v.T + b


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_tied_heads_equal_torch_with_one_set_of_weights(reference):
    torch.manual_seed(0)
    model = rpn2c.compile(TIED, reference=reference).double()
    names = set(model.state_dict())
    assert names == {"z.heads.g.xi_instance.w_q", "z.heads.g.xi_instance.w_k", "z.heads.g.psi.weight",
                     "z.heads.g.bias", "z.fusion.linear.weight", "z.fusion.linear.bias"}
    count = 4 * 2 + 3 * 2 + 3 * 4 + 4 + 8 * 4 + 4  # W_q, W_k (from 4 and 3 features), ψ, bias, fusion
    assert rpn2c.check(TIED).param_count == count == sum(p.numel() for p in model.parameters())
    shared = {k.split(".")[-1]: v.detach().clone().requires_grad_() for k, v in model.state_dict().items()
              if ".heads.g." in k}  # one set: w_q, w_k, weight (ψ), bias
    x, mem = _rand(2, 6, 4), _rand(2, 5, 3, seed=1)
    keep = torch.tensor([[abs(i - j) <= 1 for j in range(5)] for i in range(6)])
    one = [shared[k] for k in ("w_q", "w_k", "weight", "bias")]
    g, l = torch.relu(_attend(x, mem, *one)), _attend(x, mem, *one, keep=keep)
    lin = model.z.fusion.linear
    want = x + torch.cat([g, l], -1) @ lin.weight.detach().T + lin.bias.detach()
    got = model(x, mem)
    assert_close(got, want)
    w = _rand(*want.shape, seed=7)
    (got * w).sum().backward()
    (want * w).sum().backward()
    head = model.z.heads.g
    for mine, theirs in ((head.xi_instance.w_q, "w_q"), (head.xi_instance.w_k, "w_k"), (head.psi.weight, "weight"),
                         (head.bias, "bias")):
        assert_close(mine.grad, shared[theirs].grad, msg=theirs)  # both heads' contributions, summed


def test_tie_survives_conversion_and_loading():
    """``.double()`` and ``load_state_dict`` reach the tied head through its target's tensors."""
    model = rpn2c.compile(TIED)
    state = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    model = model.double()
    x, mem = _rand(1, 6, 4), _rand(1, 5, 3, seed=1)
    got = model(x, mem)
    heads = model.z.heads
    assert heads.l.xi_instance.w_q is heads.g.xi_instance.w_q and heads.l.psi.weight.dtype == torch.float64
    ref = rpn2c.compile(TIED, reference=True).double()
    ref.load_state_dict({k: v.double() for k, v in state.items()})
    assert_close(got, ref(x, mem))


PER_HEAD_POST = """model p {
  input x: sequence[B, 5, 4]
  y = layer(x) {
    head a {
      out = 3
      post = [relu]
    }
    head b {
      out = 3
      post = [layer_norm, tanh]
    }
    fusion = sum
    post = [sigmoid]
  }
  return y
}
"""


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_per_head_post_runs_before_the_head_fusion(reference):
    """y = σ(relu(x W_aᵀ + b_a) + tanh(LN(x W_bᵀ + b_b))): each head's own processing, then fusion and the layer's."""
    torch.manual_seed(0)
    model = rpn2c.compile(PER_HEAD_POST, reference=reference).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    assert rpn2c.check(PER_HEAD_POST).param_count == 2 * (4 * 3 + 3) + 2 * 3  # LayerNorm's weight and bias
    hb = model.y.heads.b
    ln = hb.head_post[0]
    ln_w = dict(ln.named_parameters())
    x = _rand(2, 5, 4)
    a = torch.relu(x @ model.y.heads.a.psi.weight.T + model.y.heads.a.bias)
    zb = x @ hb.psi.weight.T + hb.bias
    b = torch.tanh(torch.nn.functional.layer_norm(zb, (3,), *ln_w.values()))
    assert_close(model(x), torch.sigmoid(a + b))


def _error(text):
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(text, "t.rpn")
    return err.value


@pytest.mark.parametrize("change, code, at, message", [
    (("tie = g", "tie = gg"), "E0201", "11:13", "'tie' names no head of this layer: 'gg'"),
    (("tie = g", "tie = l"), "E0207", "11:13", "head 'l' cannot tie to itself"),
    (("tie = g", "tie = 2"), "E0303", "11:13", "'tie' takes the name of an earlier head"),
    (("rank = 2, window", "rank = 3, window"), "E0402", "11:13",
     "head 'l' ties to 'g', but their parameters differ ('g' vs 'l'): parameter count 30 vs 37"),
    (("      out = 4\n    }\n    fusion", "      out = 5\n    }\n    fusion"), "E0402", "11:13", "out 4 vs 5"),
    (("attention(rank = 2, window = 1)", "bilinear(window = 1)"), "E0402", "11:13",
     "xi_instance low_rank_bilinear vs bilinear"),
])
def test_tie_errors_are_located(change, code, at, message):
    err = _error(TIED.replace(*change))
    [d] = err.diagnostics
    assert d.code == code and f"{d.span.line}:{d.span.col}" == at, err.render()
    assert message in d.message, d.message
    assert f"t.rpn:{at}" in err.render()


def test_tie_to_a_later_head_is_refused():
    text = TIED.replace("    head g {\n", "    head g {\n      tie = l\n", 1).replace("      tie = g\n", "")
    [d] = _error(text).diagnostics
    assert d.code == "E0207" and "ties to 'l', which is declared after it" in d.message


def test_tie_outside_a_layer_ties_the_two_layers():
    """``tie = a`` on a head expression names an earlier layer (tests/test_tying.py): one set of weights."""
    text = "model m {\n  input x: vector[B, 3]\n  a = head(x) { out = 2 }\n  b = head(x) { out = 2  tie = a }\n" \
           "  return b\n}\n"
    g = rpn2c.check(text)
    assert g.node("b").tie == "a" and g.param_count == 8


def test_missing_width_names_the_value_not_the_internal_head():
    """A cross head without `out` is named by its value ('ga'), not by the layer's internal head name ('h')."""
    text = ("model m {\n  input a: sequence[B, 5, 4]\n  input b: sequence[B, 3, 4]\n"
            "  ga = head(a, context = b) {\n    xi_instance = attention(rank = 2)\n  }\n  return ga\n}\n")
    [d] = _error(text).diagnostics
    assert d.code == "E0402" and d.message == "head 'ga' needs its output width: add `out = n`"
    [d] = _error(text.replace("attention(rank = 2)", "attention(rank = 2)\n    heads = 2")).diagnostics
    assert d.message == "head 'ga' needs its output width: add `out = n`"
    text = text.replace("ga = head(a, context = b) {\n    xi_instance", "ga = layer(a, context = b) {\n  head q {"
                        "\n    xi_instance").replace("  }\n  return", "  }\n  }\n  return")
    [d] = _error(text).diagnostics
    assert d.message == "head 'q' needs its output width: add `out = n`"
