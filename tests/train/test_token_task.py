"""The generated `majority` token task and the shipped causal Transformer spec trained on it by `rpn2c train`."""

from __future__ import annotations

import json

import numpy as np
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.data import available, load
from rpn2c.syntax.format import format_program
from rpn2c.syntax.parser import parse
from tests.test_specs import header_shapes
from tests.train.helpers import ROOT, run_cli

SPEC = ROOT / "examples" / "specs" / "token_transformer.rpn"


def test_majority_is_generated_from_the_seed():
    assert "majority" in available()
    ds = load("majority", seed=3)
    again, other = load("majority", seed=3), load("majority", seed=4)
    assert all(torch.equal(a, b) for a, b in zip(ds.train + ds.test, again.train + again.test))
    assert not torch.equal(ds.train[0], other.train[0])
    (x, y), (xt, _) = ds.train, ds.test
    assert x.dtype == torch.int64 and x.shape == (2000, 16) and xt.shape == (500, 16) and ds.num_classes == 4
    assert ds.input_spec == "tokens[B, 16]" and int(x.min()) == 0 and int(x.max()) == 3
    counts = torch.stack([(x == v).sum(1) for v in range(4)], dim=1)
    top = counts.sort(dim=1).values
    assert (top[:, -1] > top[:, -2]).all() and torch.equal(counts.argmax(1), y)  # one most frequent id: the label
    share = torch.bincount(y, minlength=4) / len(y)
    assert share.min() > 0.2 and share.max() < 0.3  # chance is about 1/4


def test_token_transformer_spec_states_its_shapes_and_both_lowerings_agree():
    text = SPEC.read_text()
    assert len(text.splitlines()) <= 40 and format_program(parse(text, str(SPEC))) == text  # canonical form
    graph = rpn2c.check_file(SPEC)
    assert {n: str(graph.node(n).type) for n in header_shapes(text)} == header_shapes(text)
    torch.manual_seed(0)
    fast = rpn2c.compile_file(SPEC).double()
    ref = rpn2c.compile_file(SPEC, reference=True).double()
    ref.load_state_dict(fast.state_dict())
    x = torch.randint(0, 4, (3, 11), generator=torch.Generator().manual_seed(1))
    y = fast(x)
    assert_close(y, ref(x))
    w = torch.randn_like(y)
    (y * w).sum().backward()
    (ref(x) * w).sum().backward()
    for (name, p), q in zip(fast.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, msg=f"gradient of {name}")
    later = x.clone()
    later[:, -1] = (later[:, -1] + 1) % 4  # the last item sees the whole sequence: its change reaches the output
    assert not torch.allclose(fast(later), y)


def test_token_transformer_learns_majority_in_two_epochs(capsys, tmp_path):
    run = tmp_path / "run"
    code, out, err = run_cli(capsys, "train", SPEC, "--data", "majority", "--epochs", "2", "--out", run, "--quiet")
    assert code == 0, err
    assert "trained token_transformer (8,868 parameters) on majority: 2 epochs" in out
    assert json.loads((run / "metrics.json").read_text())["test"]["accuracy"] > 0.9  # chance: 0.25
    ids = tmp_path / "ids.npy"
    np.save(ids, np.array([[2] * 9 + [0, 1, 3] * 2 + [1]]))  # 9 twos of 16
    code, out, err = run_cli(capsys, "predict", SPEC, run / "checkpoint.pt", "--input", ids)
    assert code == 0, err
    assert out.splitlines()[1].startswith("0,2,")
    np.save(ids, np.array([[2] * 15 + [4]]))
    code, _, err = run_cli(capsys, "predict", SPEC, run / "checkpoint.pt", "--input", ids)
    assert code == 1 and "takes token ids in [0, 4), the array holds 2 .. 4" in err
