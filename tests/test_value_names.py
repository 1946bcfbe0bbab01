"""Value names are free: a value named after a Python keyword or a torch module attribute (``train``, ``eval``,
``to``, ``forward``, ``class``, ``lambda``) compiles, runs, trains, saves and reloads; its module sits under a free
name (``rpn2c.ir.names.module_paths``), and every other value keeps the module path, hence the ``state_dict`` keys,
it always had."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.ir.names import module_paths, needs_mangling

ROOT = Path(__file__).resolve().parents[1]
NAMES = ROOT / "tests" / "spec_corpus" / "ok" / "python_and_torch_names.rpn"
SHIPPED = sorted([*ROOT.glob("specs/*.rpn"), *ROOT.glob("specs/paper/*.rpn"), *ROOT.glob("examples/specs/*.rpn")])


def _models(path: Path) -> list[str]:
    return re.findall(r"^model (\w+)", path.read_text(encoding="utf-8"), re.M)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_spec_keeps_its_module_paths(path):
    """No value of a shipped model is moved, so its ``state_dict`` keys and old checkpoints stay valid."""
    for model in _models(path):
        ids = [n.id for n in rpn2c.check_file(path, model=model).nodes() if n.kind != "input"]
        assert module_paths(ids) == {i: i for i in ids}


SEGMENTS = st.sampled_from(["train", "train_", "train__", "eval", "to", "to_", "forward", "class", "class_",
                            "lambda", "graph", "requires_grad", "requires_grad_", "__init__", "init_", "__", "x",
                            "h1", "self", "0", "1"])


@given(ids=st.lists(st.lists(SEGMENTS, min_size=1, max_size=3).map(".".join), min_size=1, max_size=12, unique=True),
       order=st.randoms(use_true_random=False))
def test_module_paths_are_distinct_valid_and_move_only_what_must_move(ids, order):
    parents = {i.rsplit(".", 1)[0] for i in ids if "." in i}
    ids = [i for i in ids if i not in parents]  # a value is a module or a block scope, never both
    paths = module_paths(ids)
    assert len(set(paths.values())) == len(ids)  # no two values share a module
    for nid, path in paths.items():
        old, new = nid.split("."), path.split(".")
        assert len(old) == len(new) and not any(needs_mangling(s) for s in new)
        assert all(a == b for a, b in zip(old, new) if not needs_mangling(a))  # the rest keep their names
    shuffled = list(ids)
    order.shuffle(shuffled)
    assert module_paths(shuffled) == paths  # a function of the names, not of their order


def _names_model(reference=False):
    torch.manual_seed(0)
    return rpn2c.compile_file(NAMES, reference=reference)


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_a_spec_of_keyword_and_attribute_names_runs_trains_saves_and_reloads(reference):
    model = _names_model(reference)
    keys = set(model.state_dict())
    assert {"lambda_.psi.weight", "class_.train_.bias", "train_.1.eval_.psi.weight", "to_.heads.a.psi.weight",
            "forward_.bias"} <= keys
    assert "def forward(self, in_):" in model.program_source
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    model.eval()
    before = model(x)
    assert_close(model(**{"in": x}), before)  # a keyword input by name
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    opt.step()
    model.eval()
    after = model(x)
    assert not torch.equal(after, before)  # the step reached the renamed modules
    saved = io.BytesIO()
    torch.save(model.state_dict(), saved)
    saved.seek(0)
    again = _names_model(reference)
    again.load_state_dict(torch.load(saved), strict=True)
    assert_close(again.eval()(x), after, rtol=0, atol=0)


def test_a_spec_of_keyword_and_attribute_names_compiles_and_exports():
    model = _names_model().eval()
    x = torch.randn(5, 4)
    want = model(x)
    torch._dynamo.reset()
    assert_close(torch.compile(model, backend="eager", fullgraph=True)(x), want)
    assert_close(torch.export.export(model, (x,)).module()(x), want)
    torch._dynamo.reset()


def test_a_value_beside_its_would_be_module_name_keeps_its_own():
    """``train`` and ``train_`` in one model: ``train_`` keeps its name, ``train`` takes the next free one."""
    model = rpn2c.compile("model m {\n  input x: vector[B, 4]\n  train_ = head(x) { out = 3 }\n"
                          "  train = head(train_) { out = 2 }\n  return train\n}\n")
    assert list(model.state_dict()) == ["train_.bias", "train_.psi.weight", "train__.bias", "train__.psi.weight"]
    assert model(torch.randn(2, 4)).shape == (2, 2)


def test_views_and_the_cli_find_a_renamed_layer(capsys, tmp_path):
    """``show`` and the matrix view reach a layer by its spec name; ``train`` then ``eval`` reload the
    checkpoint."""
    from rpn2c.runtime.cli import main
    from rpn2c.runtime.layer_matrix import layer_matrix

    model = _names_model(reference=True).double()
    view = layer_matrix(model, "class.eval", {"in": torch.randn(1, 4, dtype=torch.float64)})
    assert_close(view.matrix, model.class_.eval_.psi.weight.detach())  # M of a perceptron is its ψ
    run = tmp_path / "run"
    assert main(["train", str(NAMES), "--data", "iris", "--epochs", "1", "--out", str(run), "--quiet"]) == 0
    assert main(["eval", str(NAMES), str(run / "checkpoint.pt"), "--format", "json"]) == 0
    assert '"accuracy"' in capsys.readouterr().out
