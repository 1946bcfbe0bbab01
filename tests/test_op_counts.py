"""Op-count parity: a training step of a model converted with ``rpn2c.from_torch`` dispatches no more non-view aten
operations than the hand-written torch module.

The count (``tests/op_count.py``) is deterministic — no timing — so it gates CI on any machine: forward, a ``.sum()``
loss and backward of one steady-state training step, eager, float32, train mode with dropout 0. A failure prints the
per-operation difference (rpn2c minus torch), i.e. the extra operations rpn2c runs.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.op_count import OpCounter, converted, count_ops, diff, is_view_op, training_step_ops

try:
    from torch_geometric.nn import GCNConv
except ImportError:  # pragma: no cover - torch_geometric is in the test extra
    GCNConv = None


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------- the view criterion
def test_views_count_zero_and_kernels_count_one():
    x, y = _randn(3, 4, seed=0), _randn(4, 5, seed=1)
    assert count_ops(lambda: x.t()) == {}
    assert count_ops(lambda: (x.view(4, 3), x.reshape(12), x.unsqueeze(0).expand(2, 3, 4), x[1:], x[0])) == {}
    assert count_ops(lambda: x @ y) == {"mm": 1}
    assert count_ops(lambda: x.clone().add_(1)) == {"clone": 1, "add_": 1}  # in-place writes are not views
    assert is_view_op(torch.ops.aten._unsafe_view.default) and is_view_op(torch.ops.aten.detach.default)
    assert not is_view_op(torch.ops.aten.add_.Tensor) and not is_view_op(torch.ops.aten.mm.default)


def test_backward_operations_are_counted():
    w = _randn(3, 4, seed=0).requires_grad_()
    x = _randn(4, 2, seed=1)
    with OpCounter() as c:
        (w @ x).sum().backward()
    assert c.ops["mm"] == 2  # forward w @ x and backward grad @ xᵀ
    assert c.views["t"] >= 1  # xᵀ is a view: recorded, not counted


# ------------------------------------------------------------------------------------------------- backbones
class _CausalSelfAttention(nn.Module):
    """nn.MultiheadAttention as causal self-attention in training code: the causal mask with ``is_causal=True``."""

    def __init__(self, mha: nn.Module, mask: torch.Tensor):
        super().__init__()
        self.mha, self.mask = mha, mask

    def forward(self, x):
        return self.mha(x, x, x, attn_mask=self.mask, is_causal=True, need_weights=False)[0]


class _SmallCNN(nn.Module):
    """A CNN written as a class (converted through torch.fx): Conv2d, ReLU, MaxPool, flatten, Linear."""

    def __init__(self):
        super().__init__()
        self.conv, self.pool, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(2), nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


def _encoder(norm_first):
    m = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=norm_first)
    x = _randn(2, 8, 64, seed=1)
    return m, (x,), converted(m, (x,)), (x,)


def _causal_mha():
    mha = nn.MultiheadAttention(64, 4, batch_first=True)
    x, mask = _randn(2, 8, 64, seed=1), torch.ones(8, 8, dtype=torch.bool).triu(1)
    model = converted(mha, (x, x, x), {"attn_mask": mask, "is_causal": True, "need_weights": False})
    return _CausalSelfAttention(mha, mask), (x,), model, (x, x, x, mask)


def _plain(m, *args):
    return m, args, converted(m, args), args


def _gcn():
    if GCNConv is None:
        pytest.skip("torch_geometric is not installed")
    edges = torch.tensor([[0, 1, 1, 2, 3, 4, 5, 0], [1, 0, 2, 1, 4, 3, 0, 5]])
    return _plain(GCNConv(16, 8), _randn(6, 16, seed=1), edges)


_ATTENTION = pytest.mark.xfail(strict=True, reason=(
    "multi-head attention runs per head (stack/cat of heads, bmm per head, copies); passes once it is one "
    "in-projection GEMM, one SDPA and one out-projection GEMM — then remove this marker"))

BACKBONES = [
    pytest.param(lambda: _encoder(False), id="encoder-post-norm"),
    pytest.param(lambda: _encoder(True), id="encoder-pre-norm"),
    pytest.param(_causal_mha, id="causal-mha"),
    pytest.param(lambda: _plain(nn.LSTM(16, 32, batch_first=True), _randn(2, 8, 16, seed=1)), id="lstm"),
    pytest.param(lambda: _plain(nn.GRU(16, 32, batch_first=True), _randn(2, 8, 16, seed=1)), id="gru"),
    pytest.param(lambda: _plain(_SmallCNN(), _randn(2, 3, 8, 8, seed=1)), id="cnn"),
    pytest.param(lambda: _plain(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                              nn.Linear(32, 4)), _randn(4, 16, seed=1)), id="mlp"),
    pytest.param(_gcn, id="gcn"),
]


@pytest.mark.parametrize("build", BACKBONES)
def test_training_step_runs_no_more_ops_than_torch(build, request):
    torch.manual_seed(0)
    hand, hand_inputs, model, model_inputs = build()
    ours, theirs = training_step_ops(model, model_inputs), training_step_ops(hand, hand_inputs)
    n_ours, n_theirs = sum(ours.values()), sum(theirs.values())
    assert n_ours <= n_theirs, (
        f"{request.node.callspec.id}: one rpn2c training step runs {n_ours} non-view ops, the torch module "
        f"{n_theirs} ({n_ours / n_theirs:.2f}x); rpn2c minus torch, by op:\n{diff(ours, theirs)}")


def test_counts_are_deterministic():
    torch.manual_seed(0)
    hand, _, model, inputs = _encoder(False)
    assert training_step_ops(model, inputs) == training_step_ops(model, inputs)
    assert training_step_ops(hand, inputs) == training_step_ops(hand, inputs)
