"""The remainder's placement: ``pi_placement = "terms"`` is the paper's eq 30,

    g(X) = Fusion({ ⟨κ^{(h)}_ξ(X), ψ^{(h)}(w^{(h),c})⟩ + π^{(h)}(X) }_{h,c}),

π added to every head and channel term before the fusions; ``"output"`` (the default, the toolkit's) adds it once
after them. Written from the equation on hand-built parts (each term X W_{h,c}ᵀ + b_h), float64, both lowerings.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import rpn2c

X = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
FUSE = {"sum": lambda ts: sum(ts), "mean": lambda ts: sum(ts) / len(ts), "max": lambda ts: torch.stack(ts).amax(0),
        "prod": lambda ts: torch.stack(ts).prod(0), "concat": lambda ts: torch.cat(ts, -1)}


def _spec(channel_fusion, head_fusion, placement, out=3):
    head = f"out = {out}  channels = 2  channel_fusion = {channel_fusion}"
    return (f"model m {{\n  input x: vector[B, 4]\n  y = layer(x) {{\n    head a {{ {head} }}\n"
            f"    head b {{ {head} }}\n    fusion = {head_fusion}\n    pi = linear(bias = false)\n"
            f"    pi_placement = \"{placement}\"\n  }}\n  return y\n}}\n")


def _by_hand(p, channel_fusion, head_fusion, placement):
    """Eq 30 (``terms``) or the toolkit's order (``output``) from the model's tensors ``p``, term by term."""
    pi = X @ p["pi.weight"].T  # π(X) = X W_πᵀ
    each = pi if placement == "terms" else 0
    heads = [FUSE[channel_fusion]([X @ p[f"heads.{h}.psi.{c}.weight"].T + p[f"heads.{h}.bias"] + each
                                   for c in range(2)]) for h in ("a", "b")]
    y = FUSE[head_fusion](heads)
    return y if placement == "terms" else y + pi


@pytest.mark.parametrize("placement", ["terms", "output"])
@pytest.mark.parametrize("channel_fusion, head_fusion, out", [
    ("sum", "sum", 3), ("mean", "max", 3), ("prod", "mean", 3), ("concat", "sum", 2), ("sum", "concat", 2)])
def test_each_placement_is_its_formula(channel_fusion, head_fusion, out, placement):
    text = _spec(channel_fusion, head_fusion, placement, out)
    if placement == "terms" and "concat" in (channel_fusion, head_fusion):
        with pytest.raises(rpn2c.SpecError) as info:  # a term is `out` wide, the fused output twice that
            rpn2c.check(text)
        d = info.value.diagnostics[0]
        assert d.code == "E0402" and d.span.line == 7 and 'use pi_placement = "output"' in d.message
        return
    torch.manual_seed(0)
    default = rpn2c.compile(text).double()
    for q in default.parameters():  # biases too (zero at first)
        q.data.normal_()
    ref = rpn2c.compile(text, reference=True).double()
    ref.load_state_dict(default.state_dict())
    want = _by_hand({k.removeprefix("y."): v for k, v in default.named_parameters()}, channel_fusion, head_fusion,
                    placement)
    for model in (default, ref):
        assert_close(model(X), want, rtol=1e-12, atol=1e-12)


def test_the_placements_differ_where_eq_30_says():
    """Sum fusions count π once per term (here 2 heads x 2 channels: 4π against π); a mean counts it once either way."""
    torch.manual_seed(0)
    models = {p: rpn2c.compile(_spec("sum", "sum", p)).double() for p in ("terms", "output")}
    models["output"].load_state_dict(models["terms"].state_dict())
    pi = X @ dict(models["terms"].named_parameters())["y.pi.weight"].T
    assert_close(models["terms"](X) - models["output"](X), 3 * pi)
    means = {p: rpn2c.compile(_spec("mean", "mean", p)).double() for p in ("terms", "output")}
    means["output"].load_state_dict(means["terms"].state_dict())
    assert_close(means["terms"](X), means["output"](X))


@pytest.mark.parametrize("text", [
    # attention heads (each term an attention head), an identity remainder
    "model m { input x: sequence[B, 5, 4]  y = layer(x) { head a { xi_instance = attention(rank = 2)  out = 4 } "
    "head b { xi_instance = attention(rank = 2)  out = 4 }  fusion = sum  pi = identity  pi_placement = \"terms\" } "
    "return y }",
    # a grid head with two channels
    "model m { input x: image[B, 2, 5, 5]  y = head(x) { xi_attribute = grid_patch(size = 3, pad = 1)  out = 2 "
    "channels = 2  channel_fusion = sum  pi = identity  pi_placement = \"terms\" } return y }",
])
def test_terms_placement_default_equals_reference(text):
    torch.manual_seed(0)
    default = rpn2c.compile(text).double()
    ref = rpn2c.compile(text, reference=True).double()
    ref.load_state_dict(default.state_dict())
    x = torch.randn(2, *(([5, 4]) if "sequence" in text else [2, 5, 5]), dtype=torch.float64)
    assert_close(default(x), ref(x), rtol=1e-10, atol=1e-10)
    once = rpn2c.compile(text.replace('pi_placement = "terms"', "")).double()
    once.load_state_dict(default.state_dict())
    assert not torch.allclose(once(x), default(x))  # two terms: π counted twice under eq 30


def test_a_placement_that_is_not_one_is_a_located_error():
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(_spec("sum", "sum", "each"))
    d = info.value.diagnostics[0]
    assert d.code == "E0303" and d.span.line == 8 and "got 'each'" in d.message
