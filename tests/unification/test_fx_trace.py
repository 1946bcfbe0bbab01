"""The tracer for library code (``rpn2c.frontends.fx_trace``): control flow on a traced tensor's rank, sizes and
dtype follows the example (as ``transformers.utils.fx`` does), ``**kwargs`` forwards and dict / ModelOutput results
are handled as documented, and a failure inside library code names that code's file and line and the module path
where tracing stopped."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import rand

import rpn2c
from rpn2c.frontends import TorchImportError


class _Meta(nn.Module):
    """Library-style code: branches on ndim, a size and the dtype, an assert on a length, torch.finfo."""

    def __init__(self, max_len: int = 8):
        super().__init__()
        self.fc, self.max_len = nn.Linear(4, 4), max_len

    def forward(self, x, scale=None, **kwargs):
        assert x.shape[1] <= self.max_len, "sequence too long"
        b, t, f = x.shape
        if x.ndim == 3 and b != x.size(0) + 1 and x.dtype == torch.float64:
            y = self.fc(x)
        else:
            y = x
        if torch.finfo(x.dtype).bits == 64 and len(x) == b and kwargs.get("gate", False):
            y = torch.sigmoid(y)
        for _ in range(t // t):
            y = y + x
        return OrderedDict(last_hidden_state=y, other=x)


def test_metadata_control_flow_follows_the_example():
    """ndim / shape / size / dtype / finfo / assert / len / range read the example; kwargs and the dict output as
    documented (the first entry is kept, non-tensor keyword arguments are baked in)."""
    spec = assert_same_model(_Meta(), (rand(2, 5, 4),), {"gate": True})
    assert "sigmoid" in spec.text and spec.input_names == ["x"]
    plain = rpn2c.from_torch(_Meta().double(), (rand(2, 5, 4),))
    assert "sigmoid" not in plain.text


class _Inner(nn.Module):
    def forward(self, x):
        return x.relu() if x.mean().item() > 0 else x


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.block = nn.Linear(3, 3), _Inner()

    def forward(self, x):
        return self.block(self.fc(x))


def test_value_read_in_library_code_names_module_path_file_and_line():
    with pytest.raises(TorchImportError, match="as Python numbers") as info:
        rpn2c.from_torch(_Outer().double(), (rand(2, 3),))
    err = info.value
    assert err.module_path == "block" and err.module_class.endswith("_Inner")
    assert err.library_file == __file__
    assert err.library_line == _Inner.forward.__code__.co_firstlineno + 1
    assert str(err).startswith(f"{__file__}:{err.library_line}:")


def test_pyg_model_class_is_traced_not_called_a_layer():
    """torch_geometric's model classes are traced through like a user's model; an unsupported setting inside one
    is reported for the conv layer it reaches, never as 'a layer with no converter'."""
    models = pytest.importorskip("torch_geometric.nn.models")
    torch.manual_seed(0)
    m = models.GraphSAGE(4, 6, num_layers=2, out_channels=2, aggr="max")
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    with pytest.raises(TorchImportError) as info:
        rpn2c.from_torch(m.double(), (rand(4, 4), ei))
    assert info.value.module_path == "convs.0" and "aggr='max'" in str(info.value)
    assert "torch_geometric layer (GraphSAGE)" not in str(info.value)


class _Casts(nn.Module):
    """Library-style casts: to the input's own dtype (identity), or to float32 (a change of values)."""

    def __init__(self, down: bool = False):
        super().__init__()
        self.fc, self.down = nn.Linear(4, 4), down

    def forward(self, x):
        dtype = x.dtype
        y = self.fc(x.to(dtype)).type_as(x)
        return y.float() if self.down else y.to(dtype=dtype)


def test_cast_to_its_own_dtype_is_the_value_and_a_downcast_refuses():
    spec = assert_same_model(_Casts(), (rand(2, 4),))
    assert spec.text.count("head(") == 1
    with pytest.raises(TorchImportError, match="a cast from torch.float64 to torch.float32") as info:
        rpn2c.from_torch(_Casts(down=True).double(), (rand(2, 4),))
    assert info.value.op == "Tensor.float"


class _Kw(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, **kwargs):
        return self.fc(x) + kwargs["bias"] if "bias" in kwargs else self.fc(x)


class _Heads(nn.Module):
    """Attention written out over [B, H, T, D] with F.scaled_dot_product_attention."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, 2, 2).transpose(1, 2) for p in (self.q, self.k, self.v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, 4)


def test_tensor_through_kwargs_and_heads_split_refuse_with_what_is_missing():
    with pytest.raises(TorchImportError, match=r"through \*\*kwargs would be baked") as info:
        rpn2c.from_torch(_Kw().double(), (rand(2, 4),), {"bias": rand(2, 4)})
    assert info.value.option == "**kwargs"
    with pytest.raises(TorchImportError, match="splits the features into 2 heads of 2") as info:
        rpn2c.from_torch(_Heads().double(), (rand(2, 3, 4),))
    assert info.value.op == "Tensor.view"


def test_a_trace_leaves_torch_factories_as_dynamo_knows_them():
    """fx's stack-trace record imports torch._dynamo during the first trace; were that under the tracer's factory
    patches, dynamo would take them for torch.ones & co. and refuse the real ones in every later compile (a
    fullgraph compile after a conversion, in a fresh interpreter)."""
    import subprocess
    import sys

    code = (
        "import sys, torch\nfrom torch import nn\nimport rpn2c\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        return torch.relu(self.fc(x)) + x\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "rpn2c.from_torch(M(), (torch.randn(2, 3, 4),))\n"
        "f = torch.compile(lambda x: x + torch.ones(3), backend='aot_eager', fullgraph=True)\n"
        "assert torch.equal(f(torch.zeros(3)), torch.ones(3))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
