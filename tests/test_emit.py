"""The straight-line program: generated once per model, the same function as the module tree, live parameters."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch.testing import assert_close

import rpn2c

ROOT = Path(__file__).resolve().parents[1]
CNN = (ROOT / "specs" / "cnn.rpn").read_text(encoding="utf-8")


def _x():
    return torch.randn(3, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def test_the_cnn_program_is_torch_calls_on_the_layers_parameters():
    src = rpn2c.compile(CNN).program_source
    assert src.count("torch.conv2d(") == 2 and src.count("max_pool2d(") == 2 and src.count("linear(") == 2
    assert "self.c1.psi.weight" in src and "self.c1(" not in src  # inlined, reading the layer's own parameter
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
