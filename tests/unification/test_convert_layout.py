"""Layout ops written with permute / view / flatten / expand / indexing, nn.GLU / nn.Softmin (and F.glu, F.softmin)
and torchvision's stochastic depth convert through torch.fx to specs equal to torch in float64 (outputs, parameter
and input gradients, free-parameter count); what has no spec form stays a located error naming the fx node."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import compile_or_skip, rand

import rpn2c
from rpn2c.frontends import TorchImportError
from rpn2c.frontends.fx_import import FxImportError


# ------------------------------------------------------------------------------------------------ channels-last
class _ConvNeXtBlock(nn.Module):
    """dwconv -> permute to channels-last -> LayerNorm(C) -> Linear -> GELU -> Linear -> permute back -> + x."""

    def __init__(self, c: int = 4):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.norm, self.up, self.down = nn.LayerNorm(c, eps=1e-6), nn.Linear(c, 3 * c), nn.Linear(3 * c, c)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.down(F.gelu(self.up(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


def test_convnext_block_channels_last_round_trip():
    torch.manual_seed(0)
    spec = assert_same_model(_ConvNeXtBlock(), (rand(2, 4, 3, 5),))
    assert "to_items(" in spec.text and "to_grid(" in spec.text and "size = [3, 5]" in spec.text


class _ChannelsLast3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return torch.relu(self.lin(x.permute(0, 2, 3, 4, 1))).permute(0, 4, 1, 2, 3).mean((2, 3, 4))


def test_channels_last_volume():
    torch.manual_seed(1)
    assert_same_model(_ChannelsLast3d(), (rand(2, 3, 2, 3, 2),))


# ------------------------------------------------------------------------------------------------ patch tokens
class _PatchTokens(nn.Module):
    """ViT's patch embedding: conv(x).flatten(2).transpose(1, 2) -> [B, N, E], then a Linear per token."""

    def __init__(self):
        super().__init__()
        self.proj, self.head = nn.Conv2d(3, 6, 2, stride=2), nn.Linear(6, 2)

    def forward(self, x):
        return self.head(self.proj(x).flatten(2).transpose(1, 2)).mean(1)


def test_vit_patch_tokens():
    torch.manual_seed(2)
    spec = assert_same_model(_PatchTokens(), (rand(2, 3, 4, 6),))
    assert "to_items(proj)" in spec.text


class _TokensRoundTrip(nn.Module):
    """Patch tokens through a per-token block and back onto the grid (Swin / SegFormer write it so):
    conv -> view(B, C, H·W).transpose(1, 2) -> LayerNorm, Linear -> transpose(1, 2).reshape(B, C, H, W) -> conv;
    a flattened grid read as a signal by a Conv1d."""

    def __init__(self):
        super().__init__()
        self.embed, self.norm, self.mix = nn.Conv2d(2, 4, 2, stride=2), nn.LayerNorm(4), nn.Linear(4, 4)
        self.out, self.seq = nn.Conv2d(4, 3, 1), nn.Conv1d(3, 2, 3, padding=1)

    def forward(self, x):
        y = self.embed(x)
        b, c, h, w = y.shape
        t = self.mix(self.norm(y.view(b, c, h * w).transpose(1, 2)))
        g = self.out(t.transpose(1, 2).reshape(b, c, h, w))
        return self.seq(torch.relu(g.flatten(2)))


def test_tokens_back_onto_the_grid_and_a_grid_read_as_a_signal():
    torch.manual_seed(10)
    spec = assert_same_model(_TokensRoundTrip(), (rand(2, 2, 4, 6),))
    assert "to_grid(" in spec.text and "size = [2, 3]" in spec.text and "size = [6]" in spec.text


# ------------------------------------------------------------------------------------------------ channel shuffle
class _Shuffle(nn.Module):
    def __init__(self, g: int = 3, c: int = 6, how: str = "reshape"):
        super().__init__()
        self.g, self.how = g, how
        self.conv, self.out = nn.Conv2d(c, c, 1, groups=g), nn.Conv2d(c, c, 1, groups=g)

    def forward(self, x):
        y = self.conv(x)
        b, c, h, w = y.size()
        y = y.view(b, self.g, c // self.g, h, w).transpose(1, 2)
        y = y.contiguous().view(b, c, h, w) if self.how == "view" else (
            torch.flatten(y, 1, 2) if self.how == "flatten" else y.reshape(b, c, h, w))
        return self.out(y)


@pytest.mark.parametrize("how", ["reshape", "view", "flatten"])
def test_channel_shuffle(how):
    torch.manual_seed(3)
    spec = assert_same_model(_Shuffle(how=how), (rand(2, 6, 3, 2),))
    assert "channel_shuffle(conv, groups = 3)" in spec.text


# ------------------------------------------------------------------------------------------------ expand, slices
class _SEExpand(nn.Module):
    """A squeeze-and-excitation gate expanded to the grid before the product (the gate is a Hadamard product)."""

    def __init__(self, c: int = 4):
        super().__init__()
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, c, 1)

    def forward(self, x):
        s = torch.sigmoid(self.fc(self.pool(x)))
        return x * s.expand_as(x) + s.expand(-1, -1, x.size(2), x.size(3))


class _Chomp(nn.Module):
    """A causal TCN layer: Conv1d padded on both sides, the trailing k outputs dropped (x[:, :, :-k])."""

    def __init__(self, k: int = 2):
        super().__init__()
        self.k, self.conv = k, nn.Conv1d(3, 4, k + 1, padding=k)

    def forward(self, x):
        return torch.relu(self.conv(x)[:, :, :-self.k])[..., 1:][:, 1:3]


def test_expand_as_broadcasts_in_the_product():
    torch.manual_seed(4)
    spec = assert_same_model(_SEExpand(), (rand(2, 4, 3, 3),))
    body = [ln for ln in spec.text.splitlines() if not ln.lstrip().startswith("#")]
    assert not any("expand" in ln for ln in body[1:])  # no operation of its own: mul and add broadcast
    assert sum("= mul(" in ln for ln in body) == 1 and sum("= add(" in ln for ln in body) == 1


def test_slicing_a_signal_time_axis_and_channels():
    torch.manual_seed(5)
    spec = assert_same_model(_Chomp(), (rand(2, 3, 7),))
    assert "slice_positions(" in spec.text and "stop = -2" in spec.text and "slice_features(" in spec.text


# ------------------------------------------------------------------------------------------------ GLU, Softmin
def test_glu_and_softmin_modules():
    torch.manual_seed(6)
    spec = assert_same_model(nn.Sequential(nn.Linear(3, 8), nn.GLU(), nn.Softmin(-1)), (rand(2, 5, 3),))
    assert "softmin" in spec.text and spec.text.count("slice_features(") == 2 and "mul(" in spec.text
    spec = assert_same_model(nn.Sequential(nn.Conv2d(2, 6, 1), nn.GLU(dim=1), nn.Softmin(dim=1)), (rand(2, 2, 3, 3),))
    assert "softmin" in spec.text


class _FunctionalGates(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.conv = nn.Linear(3, 8), nn.Conv1d(8, 8, 1)

    def forward(self, x):
        h = self.lin(x)
        g = F.glu(self.conv(h.transpose(1, 2)), dim=1)  # a signal's channels halved
        return F.softmin(F.glu(h, dim=-1), dim=-1) * g.transpose(1, 2).sigmoid()


def test_functional_glu_and_softmin():
    torch.manual_seed(7)
    spec = assert_same_model(_FunctionalGates(), (rand(2, 5, 3),))
    assert spec.text.count("slice_features(") == 4 and "softmin" in spec.text


def test_glu_across_the_items_is_a_located_error():
    with pytest.raises(TorchImportError, match=r"GLU acts on the feature axis \(2 of a items value"):
        rpn2c.from_torch(nn.Sequential(nn.Linear(3, 5), nn.GLU(dim=1)).double(), (rand(2, 4, 3),))


# ------------------------------------------------------------------------------------------------ stochastic depth
def stochastic_depth(input, p, mode, training=True):
    """A stand-in for torchvision.ops.stochastic_depth (torchvision's own code)."""
    if not training or p == 0.0:
        return input
    survival_rate = 1.0 - p
    size = [input.shape[0]] + [1] * (input.ndim - 1) if mode == "row" else [1] * input.ndim
    noise = torch.empty(size, dtype=input.dtype, device=input.device).bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return input * noise


stochastic_depth.__module__ = "torchvision.ops.stochastic_depth"
torch.fx.wrap("stochastic_depth")


class StochasticDepth(nn.Module):
    def __init__(self, p: float, mode: str):
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, input):
        return stochastic_depth(input, self.p, self.mode, self.training)


StochasticDepth.__module__ = "torchvision.ops.stochastic_depth"


class _Residual(nn.Module):
    def __init__(self, mode: str):
        super().__init__()
        self.conv, self.drop = nn.Conv2d(3, 3, 3, padding=1), StochasticDepth(0.5, mode)

    def forward(self, x):
        return x + self.drop(torch.relu(self.conv(x)))


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_stochastic_depth_is_the_identity_in_eval_and_drops_the_same_rows_in_training(mode):
    torch.manual_seed(8)
    module, x = _Residual(mode), rand(8, 3, 4, 4)
    spec = assert_same_model(module, (x,))
    assert f'stochastic_depth(p = 0.5, mode = "{mode}")' in spec.text
    model = compile_or_skip(spec).train()
    module.train()
    xs, ys = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.manual_seed(9)
    want = module(xs)
    torch.manual_seed(9)
    got = model(ys)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    w = rand(*want.shape, seed=1)
    (want * w).sum().backward()
    (got * w).sum().backward()
    torch.testing.assert_close(ys.grad, xs.grad)


class _AlwaysDrop(nn.Module):
    def forward(self, x):
        return x + stochastic_depth(torch.tanh(x), 0.2, "row", True)


def test_stochastic_depth_with_training_true_is_a_located_error():
    with pytest.raises(FxImportError, match=r"stochastic_depth.*training=True"):
        rpn2c.from_torch(_AlwaysDrop().double(), (rand(2, 3),))


# ------------------------------------------------------------------------------------------------ refusals
class _ChannelsLastMean(nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1).mean(1)


class _GroupsSummed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 1)

    def forward(self, x):
        return self.conv(x).view(2, 2, 3, 4, 5).sum(1)


@pytest.mark.parametrize("module, node, words", [
    (_ChannelsLastMean(), "mean", "per-position operations"),
    (_GroupsSummed(), "sum_1", "channel shuffle"),
])
def test_held_views_used_otherwise_are_located_errors(module, node, words):
    with pytest.raises(FxImportError) as exc:
        rpn2c.from_torch(module.double(), (rand(2, 3, 4, 5),))
    assert exc.value.node == node and words in str(exc.value) and "E0390" in str(exc.value)


# ------------------------------------------------------------------------------------------------ whole blocks
class _ShuffleUnit(nn.Module):
    """ShuffleNetV2's stride-1 unit: split the channels, a branch on one half, concat, channel shuffle."""

    def __init__(self, c: int = 8):
        super().__init__()
        h = c // 2
        self.branch = nn.Sequential(nn.Conv2d(h, h, 1), nn.BatchNorm2d(h), nn.ReLU(),
                                    nn.Conv2d(h, h, 3, padding=1, groups=h), nn.BatchNorm2d(h),
                                    nn.Conv2d(h, h, 1), nn.ReLU())

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        y = torch.cat((a, self.branch(b)), dim=1)
        n, c, h, w = y.shape
        return y.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class _ConvNeXtWithDropPath(nn.Module):
    """A ConvNeXt block with its drop path: x + drop_path(block(x)) (no layer scale)."""

    def __init__(self, c: int = 4):
        super().__init__()
        self.block, self.drop_path = _ConvNeXtBlock(c), StochasticDepth(0.25, "row")

    def forward(self, x):
        return x + self.drop_path(self.block(x) - x)


class _FiLMExpand(nn.Module):
    """A sequence gated by a per-sample [B, 1, F] vector expanded over the items."""

    def __init__(self):
        super().__init__()
        self.gate, self.lin = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        g = torch.sigmoid(self.gate(x.mean(1))).unsqueeze(1)
        return self.lin(x) * g.expand(-1, x.size(1), -1)


@pytest.mark.parametrize("make, shape", [(_ShuffleUnit, (2, 8, 3, 3)), (_ConvNeXtWithDropPath, (2, 4, 4, 4)),
                                         (_FiLMExpand, (2, 5, 3))])
def test_whole_blocks(make, shape):
    torch.manual_seed(11)
    module = make()
    if isinstance(module, _ShuffleUnit):
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.normal_()
                    m.running_var.uniform_(0.5, 2.0)
    spec = assert_same_model(module, (rand(*shape),))
    assert {_ShuffleUnit: "channel_shuffle(", _ConvNeXtWithDropPath: "stochastic_depth(",
            _FiLMExpand: "mul("}[make] in spec.text
