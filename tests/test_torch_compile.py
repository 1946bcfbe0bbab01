"""torch.compile of compiled specs gives the eager output (aot_eager for most, one inductor run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import rpn2c

pytestmark = pytest.mark.compile

SPECS = Path(__file__).resolve().parent.parent / "specs"
INPUTS = {"cnn": (3, 1, 8, 8), "transformer": (2, 5, 32)}


def _pair(name, backend, reference=False):
    text = (SPECS / f"{name}.rpn").read_text(encoding="utf-8")
    torch.manual_seed(0)
    eager = rpn2c.compile(text, reference=reference).double().eval()
    torch.manual_seed(0)
    compiled = rpn2c.compile(text, reference=reference, torch_compile={"backend": backend}).double().eval()
    compiled._orig_mod.load_state_dict(eager.state_dict())
    x = torch.randn(*INPUTS[name], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return eager, compiled, x


@pytest.mark.parametrize("name", sorted(INPUTS))
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_aot_eager_matches_eager(name, reference):
    torch._dynamo.reset()
    eager, compiled, x = _pair(name, "aot_eager", reference)
    y = eager(x)
    assert_close(compiled(x), y, rtol=1e-10, atol=1e-10)
    w = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(2))
    (compiled(x) * w).sum().backward()
    grads = {k: p.grad.clone() for k, p in compiled._orig_mod.named_parameters()}
    eager.zero_grad()
    (eager(x) * w).sum().backward()
    for k, p in eager.named_parameters():
        assert_close(grads[k], p.grad, rtol=1e-9, atol=1e-9)


def test_inductor_cnn_matches_eager():
    torch._dynamo.reset()
    eager, compiled, x = _pair("cnn", "inductor")
    assert_close(compiled(x), eager(x), rtol=1e-9, atol=1e-9)
