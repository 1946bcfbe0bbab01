"""The library catalog: small models built from the real classes of the libraries people use (torch_geometric's model
classes, transformers' models) come back through ``rpn2c.from_torch`` as the same trainable model.

Each model is built with a seed from a small random config (nothing downloaded), converted, compiled in both
lowerings and compared in float64 by ``assert_same_model``: the output, the gradients with respect to the floating
inputs, the parameter gradients mapped back to the library's names, and the number of free parameters. A model
that does not convert stays listed with the located error it hits (a strict xfail), so what still refuses is
explicit. docs/unification.md ("Library models") shows the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import rand

from rpn2c.frontends import TorchImportError


@dataclass(frozen=True)
class Case:
    package: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    refuses: str | None = None  # the located error while the model does not convert
    slow: bool = False


def _graph(n=7, f=5):
    """Node features [N, F] and a ring with two chords, both directions."""
    src = list(range(n)) + [0, 2]
    dst = [(i + 1) % n for i in range(n)] + [3, 5]
    ei = torch.tensor([src + dst, dst + src])
    return lambda: (rand(n, f, seed=1), ei)


def _pyg(name: str, **kw) -> Callable[[], nn.Module]:
    def build():
        from torch_geometric.nn import models

        torch.manual_seed(0)
        return getattr(models, name)(5, 8, num_layers=kw.pop("num_layers", 3), out_channels=3, **kw)
    return build


CASES: dict[str, Case] = {
    "pyg_gcn": Case("torch_geometric", _pyg("GCN"), _graph()),
    "pyg_gat": Case("torch_geometric", _pyg("GAT", heads=2), _graph()),
    "pyg_graphsage": Case("torch_geometric", _pyg("GraphSAGE"), _graph()),
    "pyg_gin": Case("torch_geometric", _pyg("GIN"), _graph()),
}


def _params():
    for name, case in CASES.items():
        marks = [pytest.mark.slow] if case.slow else []
        if case.refuses:
            marks.append(pytest.mark.xfail(raises=TorchImportError, strict=True, reason=case.refuses))
        yield pytest.param(case, id=name, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_library_model_converts_equal(case: Case):
    pytest.importorskip(case.package)
    assert_same_model(case.build(), case.inputs())
