"""Every refusal of ``from_torch`` is a located :class:`TorchImportError` (E0390): a corpus of small modules and
models with no exact spec form (yet) must raise it -- never an AttributeError, an fx TraceError or any other
exception -- and its message must name the module and, for a traced model, the fx node. An entry leaves the corpus
once its construction converts (then it belongs in a conversion test)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from unification_helpers import rand

import rpn2c
from rpn2c.frontends.fx_import import FxImportError
from rpn2c.frontends.torch_import import TorchImportError

try:
    from torch_geometric.nn import EdgeConv, GATv2Conv, SAGEConv
except ImportError:  # pragma: no cover - torch_geometric is optional
    EdgeConv = GATv2Conv = SAGEConv = None


class _Fn(nn.Module):
    """A model whose forward is ``fn(self, x)`` around a Linear(4, 4) ``self.fc``."""

    def __init__(self, fn, **modules):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        for k, v in modules.items():
            setattr(self, k, v)
        self.fn = fn

    def forward(self, x):
        return self.fn(self, x)


class _Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.gamma = nn.Linear(4, 4), nn.Parameter(torch.ones(4))

    def forward(self, x):
        return self.fc(x) * self.gamma  # a layer scale read in forward


class _Positions(nn.Module):
    """Position ids made in forward from the input's size, in an order learned_position does not read."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(10, 4), nn.Embedding(8, 4)

    def forward(self, ids):  # positions counted from the end: not 0..T-1 (which converts: learned_position)
        return self.tok(ids) + self.pos(torch.arange(ids.shape[1]).flip(0))


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class _Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:  # data-dependent control flow
            return y
        return -y


class _ConvOnTokens(nn.Module):
    """[B, T, E] -> [T, E, B] before a Conv1d (the batch becomes its positions): no spec form ([B, E, T] converts)."""

    def __init__(self):
        super().__init__()
        self.emb, self.conv = nn.Embedding(10, 4), nn.Conv1d(4, 3, 2)

    def forward(self, ids):
        return self.conv(self.emb(ids).permute(1, 2, 0))


class _Star(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, *xs):
        return self.fc(xs[0])


class _Graph(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = EdgeConv(nn.Linear(8, 4))

    def forward(self, x, edge_index):
        return self.conv(x, edge_index).relu()


IDS = torch.randint(0, 10, (2, 5), generator=torch.Generator().manual_seed(0))
EDGES = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])

# (id, module, example inputs, what the message must name)
CORPUS = [
    ("permute-batch-last", _ConvOnTokens(), (IDS,), "permute"),
    ("positions-made-in-forward", _Positions(), (IDS,), "flip"),
    ("constant-made-in-forward", _Fn(lambda s, x: s.fc(x) + torch.ones(x.shape[1], 4).triu()),
     (rand(2, 5, 4),), "constant (Tensor)"),
    ("parameter-in-a-matmul", _Fn(lambda s, x: s.fc(x) @ s.fc.weight), (rand(2, 4),), "reads 'fc.weight' directly"),
    ("layer-norm-weight-in-forward", _Fn(lambda s, x: F.layer_norm(s.fc(x), (4,), s.fc.weight[0])), (rand(2, 4),),
     "fc.weight"),
    ("chunk-along-the-batch", _Fn(lambda s, x: s.fc(x).chunk(2, 0)[0]), (rand(2, 4),), "chunk"),
    ("expand", _Fn(lambda s, x: s.fc(x).unsqueeze(1).expand(2, 3, 4)), (rand(2, 4),), "expand"),
    ("reshape-beyond-flatten", _Fn(lambda s, x: s.fc(x).view(2, 2, 2)), (rand(2, 4),), "view"),
    ("custom-autograd-function", _Fn(lambda s, x: _Square.apply(s.fc(x))), (rand(2, 4),), "apply"),
    ("data-dependent-control-flow", _Branch(), (rand(2, 4),), "a Python branch on the values"),
    ("comparison-where", _Fn(lambda s, x: torch.where(s.fc(x) > 0, x, -x)), (rand(2, 4),), "gt"),
    ("dropout-training-true", _Fn(lambda s, x: F.dropout(s.fc(x), 0.5, True)), (rand(2, 4),), "training=True"),
    ("rrelu-training-true", _Fn(lambda s, x: F.rrelu(s.fc(x), training=True)), (rand(2, 4),), "training=True"),
    ("in-place-with-later-reader", _Fn(lambda s, x: (lambda y: y.add_(1.0) + y)(s.fc(x))), (rand(2, 4),),
     "in place"),
    ("star-args", _Star(), (rand(2, 4),), "*args"),
    ("transposed-convolution", nn.Sequential(nn.ConvTranspose2d(2, 2, 2)), (rand(1, 2, 3, 3),), "ConvTranspose2d"),
    ("channels-last-mean-over-rows", _Fn(lambda s, x: s.conv(x).permute(0, 2, 3, 1).mean(1),
                                         conv=nn.Conv2d(3, 3, 1)), (rand(2, 3, 4, 5),), "per-position"),
    ("flattened-grid-returned", _Fn(lambda s, x: (s.conv(x).flatten(2), x), conv=nn.Conv2d(3, 3, 1)),
     (rand(2, 3, 4, 5),), "patch tokens"),
    ("grid-in-groups-not-a-shuffle", _Fn(lambda s, x: s.conv(x).view(2, 2, 3, 4, 5).sum(1),
                                         conv=nn.Conv2d(3, 6, 1)), (rand(2, 3, 4, 5),), "channel shuffle"),
    ("softmin-across-items", nn.Sequential(nn.Linear(4, 3), nn.Softmin(dim=1)), (rand(2, 3, 4),), "softmin"),
    ("prelu-per-item", nn.Sequential(nn.Linear(4, 3), nn.PReLU(3)), (rand(2, 3, 4),), "num_parameters=3"),
]
if EdgeConv is not None:
    CORPUS += [
        ("pyg-layer-without-converter", _Graph(), (rand(4, 4), EDGES), "EdgeConv"),
        ("pyg-layer-without-converter-alone", EdgeConv(nn.Linear(8, 4)), (rand(4, 4), EDGES), "EdgeConv"),
        ("gatv2-score-form", GATv2Conv(4, 2), (rand(4, 4), EDGES), "GATv2"),
        ("sage-max-aggregation", SAGEConv(4, 2, aggr="max"), (rand(4, 4), EDGES), "aggr='max'"),
    ]


@pytest.mark.parametrize(("module", "args", "names"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_refusal_is_a_located_torch_import_error(module, args, names):
    module = module.double()
    args = tuple(a.double() if a.is_floating_point() else a for a in args)
    module(*args)  # the model itself runs: only its conversion is refused
    try:
        rpn2c.from_torch(module, args)
    except TorchImportError as err:
        message = str(err)
        assert err.codes == ["E0390"], message
        assert f"module '{err.module_path or '<root>'}'" in message and err.module_class in message, message
        if isinstance(err, FxImportError):
            assert f"fx node '{err.node}'" in message, message
        assert names in message, message
    except Exception as err:  # noqa: BLE001  (the point: nothing else may escape)
        pytest.fail(f"{type(err).__name__} escaped from_torch instead of a TorchImportError: {err}")
    else:
        pytest.fail("from_torch converted it; move it to a conversion test")


def test_pyg_layer_without_converter_is_not_reported_as_untraceable():
    if EdgeConv is None:
        pytest.skip("torch_geometric is not installed")
    with pytest.raises(TorchImportError, match="no RPN 2 converter is registered for this torch_geometric layer "
                                               r"\(EdgeConv\)") as info:
        rpn2c.from_torch(_Graph().double(), (rand(4, 4), EDGES))
    assert "data-dependent" not in str(info.value) and info.value.module_path == "conv"


def test_positions_made_in_forward_name_the_embedding_node():
    with pytest.raises(FxImportError) as info:
        rpn2c.from_torch(_Positions().double(), (IDS,))
    err = info.value
    assert err.node == "pos" and "flip" in str(err) and "model input" in str(err)
