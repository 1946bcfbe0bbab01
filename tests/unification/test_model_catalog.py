"""The model catalog: well-known PyTorch models come back through ``rpn2c.from_torch`` as the same trainable model.

Each model is built with a seed, its BatchNorm statistics and constant-initialised parameters (class tokens, layer
scales, zero biases) are moved off their initial values, and ``assert_matches_torch`` converts it, compiles the spec
in both lowerings and checks in float64: the output, the gradients with respect to the floating inputs, the
parameter gradients mapped back to torch's names, and the number of free parameters
(``sum(p.numel() for p in m.parameters())``, a tied tensor once).

The models are small restatements of torchvision's classes (catalog_vision.py, catalog_vision_layout.py), of
sequence models as the common tutorials write them, of PyG's GNN examples, of Hadamard-family blocks and of weight
sharing (catalog_text_graph.py). A model that does not convert yet stays in the list as a strict xfail whose reason
is the located error or the mismatch it hits, so the list of what still refuses is explicit and a fix flips it.
docs/unification.md ("Whole models: the catalog") shows the same table.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch import nn

import rpn2c

import catalog_text_graph as tg
import catalog_vision as cv
import catalog_vision_layout as cl
from rpn2c.frontends import TorchImportError
from unification_helpers import assert_matches_torch, rand


@dataclass(frozen=True)
class Case:
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    refuses: str | None = None  # the located error or mismatch while the model does not convert
    raises: type = TorchImportError  # the exception that error is (a strict xfail with another one fails)


def _image(size, batch=2):
    return lambda: (rand(batch, 3, size, size, seed=1),)


def _ids(vocab, t=6, batch=2, pad_last=0, seed=3):
    """Token ids in [1, vocab), the last ``pad_last`` positions of the second sample set to 0 (padding)."""
    def make():
        ids = torch.randint(1, vocab, (batch, t), generator=torch.Generator().manual_seed(seed))
        if pad_last:
            ids[1, t - pad_last:] = 0
        return (ids,)
    return make


def _graph(n=6, f=5):
    """Node features [N, F] and the edges of a ring with two chords, both directions."""
    src = list(range(n)) + [0, 2]
    dst = [(i + 1) % n for i in range(n)] + [3, 5]
    edges = torch.tensor([src + dst, dst + src])
    return lambda: (rand(n, f, seed=2), edges)


def _sequence(d=8, t=5, batch=2):
    return lambda: (rand(batch, t, d, seed=4),)


def _vector(n=10, batch=3):
    return lambda: (rand(batch, n, seed=5),)


def _seq2seq():
    gen = torch.Generator().manual_seed(6)
    return lambda: (torch.randint(0, 16, (2, 5), generator=gen), torch.randint(0, 12, (2, 4), generator=gen))


CATALOG: dict[str, Case] = {
    # torchvision
    "resnet18": Case(lambda: cv.ResNet(cv.BasicBlock, [2, 1]), _image(16)),
    "resnet50": Case(lambda: cv.ResNet(cv.Bottleneck, [1, 1], planes=(2, 4)), _image(16)),
    "densenet": Case(cv.DenseNet, _image(16)),
    "mobilenet_v2": Case(cv.MobileNetV2, _image(16)),
    "mobilenet_v3": Case(cv.MobileNetV3, _image(16)),
    "efficientnet": Case(cv.EfficientNet, _image(16)),
    "shufflenet_v2": Case(cl.ShuffleNetV2, _image(16)),
    "convnext": Case(cl.ConvNeXt, _image(16)),
    "vit": Case(cl.VisionTransformer, _image(8)),
    "vgg": Case(cl.VGG, _image(20)),
    "squeezenet": Case(cl.SqueezeNet, _image(25)),
    # sequence models
    "lstm_classifier": Case(tg.LSTMClassifier, _ids(20)),
    "bigru_tagger": Case(tg.BiGRUTagger, _ids(20)),
    "textcnn": Case(tg.TextCNN, _ids(20, t=7)),
    "transformer_classifier": Case(tg.TransformerClassifier, _ids(20)),
    "bert": Case(tg.BertLike, _ids(20, pad_last=2)),
    "gpt": Case(tg.GPTLike, _ids(16)),
    "seq2seq_transformer": Case(tg.Seq2SeqTransformer, _seq2seq()),
    # torch_geometric
    "gcn": Case(tg.gcn, _graph()),
    "gat": Case(tg.gat, _graph()),
    "graphsage": Case(tg.graphsage, _graph()),
    "gin": Case(tg.gin, _graph()),
    # Hadamard family
    "llama_swiglu": Case(tg.FeedForward, _sequence()),
    "glu": Case(tg.GLUBlock, _sequence()),
    # weight sharing
    "tied_lm": Case(tg.TiedLM, _ids(16)),
    "albert": Case(tg.AlbertLike, _ids(20)),
    "tied_autoencoder": Case(tg.TiedAutoencoder, _vector()),
}

_NEEDS_PYG = {"gcn", "gat", "graphsage", "gin"}


def _settle(model: nn.Module, seed: int) -> nn.Module:
    """Move BatchNorm statistics and every parameter a little off its initial value (a class token of zeros, a layer
    scale of one constant, zero biases would hide a wrong broadcast or a dropped term); embeddings stay as initialised, so their padding
    rows stay zero."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
        skip = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
        for p in model.parameters():
            if id(p) not in skip:
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.1)
    return model


@pytest.fixture
def float64_default():
    """Tensors the models make in forward (masks, positions) in float64, as the compared models are."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _params():
    for name, case in CATALOG.items():
        marks = []
        if name in _NEEDS_PYG:
            marks.append(pytest.mark.skipif(not _has_pyg(), reason="torch_geometric is not installed"))
        if case.refuses:
            marks.append(pytest.mark.xfail(strict=True, raises=case.raises, reason=case.refuses))
        yield pytest.param(name, id=name, marks=marks)


def _has_pyg() -> bool:
    return importlib.util.find_spec("torch_geometric") is not None


@pytest.mark.parametrize("name", list(_params()))
def test_catalog_model_is_the_same_trainable_model(name, float64_default):
    case = CATALOG[name]
    torch.manual_seed(0)
    model = _settle(case.build(), seed=1)
    assert_matches_torch(model, case.inputs(), input_grads=True)


def test_catalog_holds_the_families_of_the_issue():
    """The catalog keeps every family the done-when names (26 models and more), so dropping one is a visible
    change."""
    assert len(CATALOG) >= 26
    for family in ("resnet18", "resnet50", "densenet", "mobilenet_v2", "mobilenet_v3", "efficientnet",
                   "shufflenet_v2", "convnext", "vit", "lstm_classifier", "bigru_tagger", "textcnn",
                   "transformer_classifier", "bert", "gpt", "seq2seq_transformer", "gcn", "gat", "graphsage", "gin",
                   "llama_swiglu", "glu", "tied_lm", "albert", "tied_autoencoder"):
        assert family in CATALOG


def test_the_documented_catalog_table_matches_the_test():
    """docs/unification.md ("Whole models: the catalog") has one row per model, "yes" exactly for the models that
    convert, so flipping an xfail without updating the table (or the reverse) fails here."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "unification.md").read_text(encoding="utf-8")
    section = doc.split("### Whole models: the catalog", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| model ")]
    verdicts = [line.rstrip(" |").rsplit("| ", 1)[1] for line in rows]
    assert len(rows) == len(CATALOG)
    assert sum(v == "yes" for v in verdicts) == sum(c.refuses is None for c in CATALOG.values())
    assert sum(v.startswith("no:") for v in verdicts) == sum(c.refuses is not None for c in CATALOG.values())
    converting = sum(c.refuses is None for c in CATALOG.values())
    assert f"So {converting} of {len(CATALOG)} convert." in section
