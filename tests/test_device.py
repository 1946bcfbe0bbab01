"""Device-following: compiled specs run where their inputs and parameters are.

On CPU the ``meta`` device stands in for an accelerator: a tensor made inside ``forward`` without the input's
device (a CPU constant, a mask, an index) meets meta tensors and fails. The ``gpu`` tests run every spec on CUDA
against CPU, and compile the backbones with inductor there; they are deselected where no GPU is present
(``-m "not gpu"``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.runtime.export_cli import example_inputs

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").glob("*.rpn")) + sorted((ROOT / "examples" / "specs").glob("*.rpn"))
DATA_DEPENDENT = {  # what reads values, not only shapes: cannot run on meta tensors
    "gat_nodes": "the edge softmax drops listed self-loops (nonzero)",
    "token_transformer": "token ids are range-checked (item)",
}
BACKBONES = ("cnn", "rnn", "gcn", "transformer", "mlp")


def _model_and_inputs(path, dtype=torch.float32):
    model = rpn2c.compile_file(path).to(dtype).eval()
    values, _ = example_inputs(model.graph, dtype=dtype)
    return model, values


@pytest.mark.parametrize("path", [p for p in SPECS if p.stem not in DATA_DEPENDENT], ids=lambda p: p.stem)
def test_specs_follow_the_device_of_their_inputs(path):
    model, values = _model_and_inputs(path)
    with torch.no_grad():
        want = model(*values)
        got = model.to("meta")(*[v.to("meta") for v in values])
    for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        assert g.device.type == "meta" and g.shape == w.shape and g.dtype == w.dtype


def test_the_meta_check_catches_a_constant_made_on_the_cpu():
    """The guard above can fail: a forward that adds a CPU tensor to a meta one raises."""
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.ones(3, device="meta") + torch.ones(3)


# ------------------------------------------------------------------------------------------------ CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_specs_on_cuda_equal_cpu_in_outputs_and_gradients(path):
    torch.manual_seed(0)
    model, values = _model_and_inputs(path, torch.float64)
    gpu = rpn2c.compile_file(path).double().eval().cuda()
    gpu.load_state_dict(model.state_dict())
    want = model(*values)
    got = gpu(*[v.cuda() for v in values])
    want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
    for w, g in zip(want, got):
        assert_close(g.cpu(), w, rtol=1e-7, atol=1e-9)
    sum(o.square().sum() for o in want).backward()
    sum(o.square().sum() for o in got).backward()
    for (name, p), q in zip(gpu.named_parameters(), model.parameters()):
        if q.grad is not None:
            assert_close(p.grad.cpu(), q.grad, rtol=1e-6, atol=1e-8, msg=name)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("name", BACKBONES)
def test_backbones_compile_with_inductor_on_cuda(name):
    torch._dynamo.reset()
    model, values = _model_and_inputs(ROOT / "specs" / f"{name}.rpn")
    model = model.cuda()
    values = [v.cuda() for v in values]
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        want, got = model(*values), compiled(*values)
    assert_close(got, want, rtol=1e-4, atol=1e-5)
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
        low = compiled(*values)
    assert torch.isfinite(low.float()).all()
