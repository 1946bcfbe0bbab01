"""from_torch on squeeze-and-excitation gates: ``x * scale`` with ``scale`` a ``[B, C, 1, 1]`` grid (global average
pool, two 1×1 convolutions, sigmoid) times the ``[B, C, H, W]`` grid it gates, as torchvision's
``SqueezeExcitation``, EfficientNet's MBConv and MobileNetV3 compute it.

RPN 2 reading: the gate is a Hadamard product ``mul`` whose size-1 spatial axes broadcast over the gated grid
(docs/components.md, ``mul``); the residual of MBConv is an ``add`` of two grids of one type.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close
from unification_helpers import assert_matches_torch, compile_or_skip, rand

import rpn2c


class SqueezeExcitation(nn.Module):
    """avgpool(1) → conv1×1 → ReLU → conv1×1 → Sigmoid → ``x * scale``; ``how`` spells the product."""

    def __init__(self, c, squeeze, how="op"):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.act, self.gate = nn.ReLU(), nn.Sigmoid()
        self.how = how

    def forward(self, x):
        scale = self.gate(self.fc2(self.act(self.fc1(self.avgpool(x)))))
        if self.how == "torch.mul":
            return torch.mul(x, scale)
        if self.how == "method":
            return x.mul(scale)
        if self.how == "left":
            return scale * x
        return x * scale


class SENet(nn.Module):
    def __init__(self, how="op"):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.se = SqueezeExcitation(8, 2, how)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    def forward(self, x):
        return self.head(self.se(torch.relu(self.stem(x))))


class MBConv(nn.Module):
    """1×1 expand conv, depthwise 3×3 conv, squeeze-and-excitation, 1×1 project conv, residual add."""

    def __init__(self, c, expand=3):
        super().__init__()
        e = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e),
                                       nn.SiLU())
        self.se = SqueezeExcitation(e, max(1, c // 2))
        self.project = nn.Sequential(nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.project(self.se(self.depthwise(self.expand(x))))


class MBNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.block = MBConv(4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.block(self.stem(x))), 1))


def _n_params(module):
    return sum(p.numel() for p in module.parameters())


def _check(module, x):
    """Outputs, parameter gradients (both lowerings), input gradients and the number of free parameters."""
    torch.manual_seed(0)
    spec = assert_matches_torch(module, (x,))
    model = compile_or_skip(spec)
    assert sum(p.numel() for p in model.parameters()) == _n_params(module), spec.text
    for reference in (False, True):
        model = compile_or_skip(spec, reference)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        w = rand(*module(x).shape, seed=3)
        (module(xa) * w).sum().backward()
        (model(xb) * w).sum().backward()
        assert_close(xb.grad, xa.grad, rtol=1e-8, atol=1e-9)
    return spec


@pytest.mark.parametrize("how", ["op", "left", "torch.mul", "method"])
def test_squeeze_excitation_converts(how):
    torch.manual_seed(1)
    spec = _check(SENet(how), rand(2, 3, 5, 6, seed=1))
    assert "mul(" in spec.text


def test_mbconv_converts():
    torch.manual_seed(2)
    net = MBNet()
    for m in net.modules():  # non-trivial running statistics, so eval-mode batch norm is not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    spec = _check(net, rand(2, 3, 6, 5, seed=2))
    assert "add(" in spec.text and "mul(" in spec.text


def test_non_broadcasting_pair_is_a_located_error():
    text = """\
model m {
  input x: image[B, 4, 6, 6]
  input s: image[B, 4, 2, 1]
  y = mul(x, s)
  return y
}
"""
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.compile(text)
    msg = str(err.value)
    assert any(c.startswith("E04") for c in err.value.codes), msg
    assert "image[B, 4, 6, 6]" in msg and "image[B, 4, 2, 1]" in msg, msg
    assert ":4:" in msg or "line 4" in msg, msg
