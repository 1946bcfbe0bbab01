"""Layout ops through torch.fx: a sequence [B, T, E] <-> a signal [B, E, T] around nn.Conv1d (transpose, permute,
mT), chunk / split along the feature axis (a GLU gate) and cat along the item axis convert and equal torch in
float64 (outputs, input and parameter gradients, free-parameter count); a permute with no spec form stays a located
error naming the node."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import rpn2c
from rpn2c.frontends.fx_import import FxImportError

from unification_helpers import assert_matches_torch, compile_or_skip, rand


class _TCN(nn.Module):
    """x [B, T, E] -> Conv1d over T -> ReLU -> back to [B, T, C] -> Linear, the axis swap written as ``swap``."""

    def __init__(self, swap: str, e: int = 4, c: int = 6, out: int = 3):
        super().__init__()
        self.swap = swap
        self.conv = nn.Conv1d(e, c, 3, padding=1)
        self.lin = nn.Linear(c, out)

    def _swap(self, x):
        if self.swap == "transpose":
            return x.transpose(1, 2)
        if self.swap == "transpose_neg":
            return x.transpose(-1, -2)
        if self.swap == "permute":
            return x.permute(0, 2, 1)
        if self.swap == "torch.permute":
            return torch.permute(x, (0, 2, 1))
        return x.mT

    def forward(self, x):
        return self.lin(self._swap(torch.relu(self.conv(self._swap(x)))))


class _TextCNN(nn.Module):
    """Token ids -> embedding [B, T, E] -> permute to [B, E, T] -> Conv1d -> ReLU -> max over time -> Linear."""

    def __init__(self):
        super().__init__()
        self.emb, self.conv, self.fc = nn.Embedding(10, 4), nn.Conv1d(4, 6, 2), nn.Linear(6, 2)

    def forward(self, ids):
        return self.fc(self.conv(self.emb(ids).permute(0, 2, 1)).relu().amax(2))


class _GLU(nn.Module):
    def __init__(self, e: int = 4, h: int = 5, how: str = "chunk"):
        super().__init__()
        self.proj, self.out, self.how = nn.Linear(e, 2 * h), nn.Linear(h, 2), how

    def forward(self, x):
        z = self.proj(x)
        a, b = z.chunk(2, -1) if self.how == "chunk" else z.split([5, 5], dim=-1)
        return self.out(a * torch.sigmoid(b))


class _CatItems(nn.Module):
    def __init__(self, e: int = 4):
        super().__init__()
        self.a, self.b, self.out = nn.Linear(e, e), nn.Linear(e, e), nn.Linear(e, 2)

    def forward(self, x, y):
        return self.out(torch.cat([self.a(x), self.b(y)], dim=1)).mean(1)


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _check(module, args):
    spec = assert_matches_torch(module, args)
    model = compile_or_skip(spec)
    assert sum(p.numel() for p in model.parameters()) == _count(module)
    return spec


def _input_grads(module, args):
    """Input gradients of the compiled spec equal torch's."""
    module = module.double().eval()
    spec = rpn2c.from_torch(module, args)
    model = compile_or_skip(spec).double()
    xs = [a.detach().clone().requires_grad_() for a in args]
    ys = [a.detach().clone().requires_grad_() for a in args]
    w = rand(*module(*args).shape, seed=3)
    (module(*xs) * w).sum().backward()
    (model(*ys) * w).sum().backward()
    for a, b in zip(xs, ys):
        assert_close(b.grad, a.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("swap", ["transpose", "transpose_neg", "permute", "torch.permute", "mT"])
def test_sequence_to_signal_and_back_around_conv1d(swap):
    torch.manual_seed(0)
    module, x = _TCN(swap), rand(2, 7, 4)
    spec = _check(module, (x,))
    assert "to_signal(" in spec.text and "to_items(" in spec.text
    _input_grads(_TCN(swap), (x,))


def test_text_cnn_permutes_embeddings_into_a_signal():
    torch.manual_seed(3)
    ids = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(0))
    spec = _check(_TextCNN(), (ids,))
    assert "to_signal(emb" in spec.text


def test_glu_chunk_and_split_on_the_feature_axis():
    for how in ("chunk", "split"):
        torch.manual_seed(1)
        module, x = _GLU(how=how), rand(2, 5, 4)
        spec = _check(module, (x,))
        assert spec.text.count("slice_features(") == 2
        _input_grads(_GLU(how=how), (x,))


def test_cat_along_the_item_axis():
    torch.manual_seed(2)
    module, args = _CatItems(), (rand(2, 3, 4), rand(2, 5, 4, seed=1))
    spec = _check(module, args)
    assert "concat_items(" in spec.text
    _input_grads(_CatItems(), args)


class _BadPermute(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x.permute(1, 0, 2))


class _ChunkItems(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        a, b = x.chunk(2, 1)
        return self.lin(a + b)


@pytest.mark.parametrize("module,what", [(_BadPermute(), "permute"), (_ChunkItems(), "chunk")])
def test_unsupported_layouts_are_located_errors(module, what):
    with pytest.raises(FxImportError) as err:
        rpn2c.from_torch(module.double(), (rand(2, 6, 4),))
    assert err.value.node and what in err.value.node and what in err.value.op
