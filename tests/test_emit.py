"""The straight-line program: generated once per model, the same function as the module tree, live parameters."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import torch
from torch.testing import assert_close

import rpn2c

ROOT = Path(__file__).resolve().parents[1]
CNN = (ROOT / "specs" / "cnn.rpn").read_text(encoding="utf-8")


def _x():
    return torch.randn(3, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def test_the_cnn_program_is_its_rewritten_terms_kernel_calls():
    src = rpn2c.compile(CNN).program_source
    ops = _emitted_ops(src)
    assert ops.count("conv") == 2 and ops.count("pool") == 2 and ops.count("linear") == 2
    assert "rpn2c_conv(c1, x)" in src and "self.c1(" not in src  # inlined, on the layer module's own parameters
    assert "self.f(" in src  # the flatten op stays a module call


def test_inline_and_module_calls_compute_the_same_function_and_hooks_need_module_calls():
    model = rpn2c.compile(CNN).double().eval()
    y = model(_x())
    seen = []
    model.c1.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    model(_x())
    assert seen == []  # the inlined conv bypasses the layer's __call__
    model.emit(inline=False)
    assert "self.c1(" in model.program_source
    assert_close(model(_x()), y, rtol=0, atol=0)
    assert seen == [torch.Size([3, 16, 8, 8])]


def test_the_program_reads_parameters_live_after_load_convert_and_copy():
    a, b = rpn2c.compile(CNN).eval(), rpn2c.compile(CNN).eval()
    b.load_state_dict(a.state_dict())
    a, b = a.double(), b.double()
    assert_close(a(_x()), b(_x()), rtol=0, atol=0)
    with torch.no_grad():
        b.c1.psi.weight.mul_(2.0)
    assert not torch.allclose(a(_x()), b(_x()))
    c = copy.deepcopy(b)
    assert_close(c(_x()), b(_x()), rtol=0, atol=0)
    with torch.no_grad():
        c.c1.psi.weight.zero_()
    assert not torch.allclose(c(_x()), b(_x()))  # the copy's program reads the copy's parameters


def _emitted_ops(src: str) -> list[str]:
    return re.findall(r"rpn2c_lower_emitters_rpn2c_([a-z_]+?)(?:_\d+)?\(", src)


def test_the_emitted_calls_are_the_ops_of_the_rewritten_terms():
    """Every layer is its rewritten term, one call per distinct subterm: with the conv rule off c1 runs im2col,
    κ, ψ and the bias; channels, pre-processing and fusion are calls of their ops too. The oracle inlines
    nothing: every layer is a call of its literal module."""
    from rpn2c.lower.build import CompiledModel
    from rpn2c.passes import optimize

    graph = optimize(rpn2c.check(CNN), disable={"conv"})
    assert str(graph.node("c1").terms[1]).startswith("process[relu](linear[tied](unfold")
    src = CompiledModel(graph).program_source
    assert "conv" not in _emitted_ops(src) and "self.c1(" not in src and _emitted_ops(src).count("pool") == 2
    assert _emitted_ops(src)[:3] == ["unfold", "linear", "process"]
    text = ("model m {\n  input x: vector[B, 4]\n  a = head(x) { pre = [layer_norm]  out = 3 }\n"
            "  b = head(a) { channels = 2  out = 3 }\n  y = head(b) { out = 2 }\n  return y\n}\n")
    model = rpn2c.compile(text).double()
    ops = _emitted_ops(model.program_source)
    for node in (model.graph.node(n) for n in ("a", "b", "y")):
        want = sorted(t.op for t in node.terms[1].walk() if t.op != "input")
        assert sorted(ops[:len(want)]) == want, (node.id, ops, str(node.terms[1]))
        ops = ops[len(want):]
    assert ops == []
    ref = rpn2c.compile(text, reference=True).double()
    assert "rpn2c_" not in ref.program_source and "self.y(" in ref.program_source
    assert "conv2d(" not in rpn2c.compile(CNN, reference=True).program_source  # the oracle inlines no kernel
    ref.load_state_dict(model.state_dict())
    x = torch.randn(5, 4, dtype=torch.float64)
    assert_close(model(x), ref(x), rtol=1e-12, atol=1e-12)


def test_a_single_head_with_a_head_fusion_is_not_inlined_as_its_head():
    """Found by the fuzz harness: `head(x) { fusion = ... }` fuses its one head; the term keeps the fusion, so
    the emitter does not inline the head's F.linear alone (the fusion changes the width)."""
    text = ("model m {\n  input x: sequence[B, 2, 8]\n  v0 = head(x) {\n    fusion = concat_linear(out = 3)\n"
            "    out = 2\n  }\n  y = head(v0) { out = 4 }\n  return y\n}\n")
    model = rpn2c.compile(text).double()
    assert str(model.graph.node("v0").terms[1]).startswith("fuse_heads[concat_linear](")
    assert "rpn2c_fuse_heads(v0" in model.program_source
    ref = rpn2c.compile(text, reference=True).double()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(3, 2, 8, dtype=torch.float64)
    assert model(x).shape == (3, 2, 4)
    assert_close(model(x), ref(x), rtol=1e-12, atol=1e-12)


def test_a_graph_the_optimiser_never_saw_runs_its_terms_as_built():
    """No rule fired, so no kernel runs: the paper's literal forms (patches by the padding matrix), equal to the
    reference lowering."""
    from rpn2c.lower.build import CompiledModel

    model = CompiledModel(rpn2c.check(CNN)).double().eval()
    ops = set(_emitted_ops(model.program_source))
    assert "patches" in ops and not ops & {"conv", "pool", "unfold", "linear"}
    ref = rpn2c.compile(CNN, reference=True).double().eval()
    ref.load_state_dict(model.state_dict())
    assert_close(model(_x()), ref(_x()), rtol=1e-12, atol=1e-12)
