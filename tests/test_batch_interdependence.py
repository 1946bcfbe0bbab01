"""The opt-in interdependence across the batch (paper §3.4, §5.1.3): ``batch_as_items`` / ``batch_as_samples`` make the
samples of a vector batch the items of one sample, so an instance ξ relates them. Equal to the formula on the batch
in both lowerings (values and gradients, float64); outputs depend on the batch's composition (eval mode too), which
without the opt-in they never do; misuse is a located error."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.errors import SpecError
from tests.test_lowering_equivalence import _rand, assert_equivalent

SPEC = """model tab(features = 4) {
  input x: vector[B, features]
  n = batch_as_items(x)
  h = head(n) {
    xi_instance = gaussian_rbf_kernel(sigma = 2.0, norm = "row")
    out = 3
  }
  y = batch_as_samples(h)
  return y
}
"""


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_batch_kernel_equals_the_formula(reference):
    """y = A X Wᵀ + b, A_ij = exp(−‖x_i − x_j‖²/(2σ²)) over the samples i, j of the batch, row-normalised."""
    torch.manual_seed(0)
    model = rpn2c.compile(SPEC, reference=reference).double().eval()
    x = _rand(7, 4).requires_grad_()
    y = model(x)
    assert y.shape == (7, 3)
    xd = x.detach().clone().requires_grad_()
    a = torch.exp(-torch.cdist(xd, xd) ** 2 / 8.0)
    a = a / a.sum(1, keepdim=True)
    w, b = model.h.psi.weight, model.h.bias
    want = a @ xd @ w.T + b
    assert_close(y, want)
    g = _rand(7, 3, seed=5)
    (gx,) = torch.autograd.grad((y * g).sum(), x)
    (gw,) = torch.autograd.grad((want * g).sum(), xd)
    assert_close(gx, gw)


@pytest.mark.parametrize("xi", ["gaussian_rbf_kernel(sigma = 2.0)", "linear_kernel", 'cosine_similarity',
                                "low_rank_bilinear(rank = 2)", 'chain(norm = "row")'])
def test_batch_interdependence_default_equals_reference(xi):
    text = SPEC.replace('gaussian_rbf_kernel(sigma = 2.0, norm = "row")', xi)
    assert_equivalent(text, {"x": _rand(6, 4)})


def test_outputs_depend_on_the_batch_only_with_the_opt_in():
    """Changing sample 5 changes sample 0's output in eval mode (the documented consequence); a plain head on the
    vector batch keeps samples independent."""
    torch.manual_seed(0)
    model = rpn2c.compile(SPEC).double().eval()
    x = _rand(6, 4)
    x2 = x.clone()
    x2[5] += 3.0
    assert not torch.allclose(model(x)[0], model(x2)[0])
    assert_close(model(x[:1]), model(x[:1]))  # deterministic for a fixed batch
    plain = rpn2c.compile("model p { input x: vector[B, 4] y = head(x) { out = 3 } return y }").double().eval()
    assert_close(plain(x)[0], plain(x2)[0])


@pytest.mark.parametrize("body, at, needle", [
    ("input x: sequence[B, 5, 4]\n  n = batch_as_items(x)", "3:7", "relates the samples of a vector[B, F] batch"),
    ("input x: vector[B, 4]\n  n = batch_as_samples(x)", "3:7", "needs one implicit sample of items"),
])
def test_misuse_is_a_located_error(body, at, needle):
    text = "model m {\n  " + body + "\n  return n\n}\n"
    with pytest.raises(SpecError) as err:
        rpn2c.check(text, "m.rpn")
    [d] = err.value.diagnostics
    assert needle in d.message and f"{d.span.line}:{d.span.col}" == at
    assert f"m.rpn:{at}" in err.value.render()
