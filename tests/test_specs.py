"""Every shipped spec checks, its header comment states its inferred shapes, and both lowerings agree."""

import re
from pathlib import Path

import pytest
import torch

import rpn2c
from rpn2c.components.sequence import random_tokens

SPECS = sorted(Path(__file__).resolve().parents[1].joinpath("specs").glob("*.rpn"))


def header_shapes(text: str) -> dict[str, str]:
    """The `# inferred shapes:` block of a spec header: value name -> type text."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == "# inferred shapes:")
    out = {}
    for ln in lines[start + 1:]:
        m = re.match(r"#\s+(\S+)\s+(\S+\[[^\]]*\])", ln)
        if not m:
            break
        out[m.group(1)] = m.group(2)
    return out


def test_the_five_backbone_specs_ship():
    assert {p.stem for p in SPECS} >= {"mlp", "cnn", "rnn", "gcn", "transformer"}


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_header_states_the_inferred_shapes(path):
    text = path.read_text()
    assert text.startswith("# "), "every spec starts with a comment header saying what it is"
    want = header_shapes(text)
    graph = rpn2c.check_file(path)
    have = {node.id: str(node.type) for node in graph.nodes()}
    assert want, "the header lists shapes"
    for name, typ in want.items():
        assert have.get(name) == typ, f"{path.name}: header says {name} is {typ}, checker infers {have.get(name)}"


def random_inputs(graph, n_items=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    inputs = []
    for nid in graph.inputs:
        t = graph.node(nid).type
        if t.kind == "edges":
            inputs.append(torch.randint(0, n_items, (2, 3 * n_items), generator=g))
            continue
        shape = [d if isinstance(d, int) else (2 if i == 0 else n_items)
                 for i, d in enumerate(t.shape)]
        if not t.batched:
            shape = shape[1:]
        if t.kind == "tokens":  # ids below the vocabulary of every embedding reading them
            inputs.append(random_tokens(graph, nid, shape, g))
            continue
        inputs.append(torch.randn(*shape, generator=g, dtype=torch.float64))
    return inputs


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_default_lowering_equals_reference_lowering(path):
    torch.manual_seed(0)
    fast = rpn2c.compile_file(path).double().eval()
    ref = rpn2c.compile_file(path, reference=True).double().eval()
    ref.load_state_dict(fast.state_dict())
    inputs = random_inputs(fast.graph)
    y_fast, y_ref = fast(*inputs), ref(*inputs)
    torch.testing.assert_close(y_fast, y_ref)
    w = torch.randn_like(y_fast)
    (y_fast * w).sum().backward()
    (y_ref * w).sum().backward()
    theirs = dict(ref.named_parameters())  # two independent builds: the same names, registered in their own order
    assert set(theirs) == {name for name, _ in fast.named_parameters()}
    for name, p in fast.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, msg=f"gradient of {name}")


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_parameter_count_matches_module(path):
    model = rpn2c.compile_file(path)
    assert sum(p.numel() for p in model.parameters()) == model.graph.param_count


def test_parameter_names_follow_the_spec():
    names = set(rpn2c.compile_file(SPECS[[p.stem for p in SPECS].index("cnn")]).state_dict())
    assert {"c1.psi.weight", "c1.bias", "y.psi.weight"} <= names


def test_eval_reaches_processing_modules_and_state_dict_keeps_them():
    model = rpn2c.compile_file(SPECS[[p.stem for p in SPECS].index("mlp")])
    model.eval()
    assert all(not m.training for m in model.modules())
    keys = set(model.state_dict())
    assert "h2.post.0.weight" in keys and "h2.post.0.bias" in keys  # the LayerNorm is registered


def test_lenet_parameter_count_is_textbook():
    text = """
    model lenet {
      input x: image[B, 1, 28, 28]
      c1 = head(x) { xi_attribute = grid_patch(size = 5, pad = 2)  out = 6  post = [relu] }
      p1 = compress(c1) { kappa = patch_max(size = 2) }
      c2 = head(p1) { xi_attribute = grid_patch(size = 5)  out = 16  post = [relu] }
      p2 = compress(c2) { kappa = patch_max(size = 2) }
      f = flatten(p2)
      h1 = head(f) { out = 120  post = [relu] }
      h2 = head(h1) { out = 84  post = [relu] }
      y = head(h2) { out = 10 }
      return y
    }"""
    graph = rpn2c.check(text)
    assert str(graph.node("p2").type) == "image[B, 16, 5, 5]"
    assert graph.param_count == 61706  # LeNet-5: 156 + 2416 + 48120 + 10164 + 850


def test_model_parameters_can_be_overridden_from_python():
    base = rpn2c.check_file("specs/rnn.rpn")
    wide = rpn2c.check_file("specs/rnn.rpn", params={"hidden": 16, "classes": 3})
    assert str(wide.node("y").type) == "vector[B, 3]" and str(wide.node("r").type) == "sequence[B, T, 16]"
    assert wide.param_count < base.param_count and wide.content_hash() != base.content_hash()
    model = rpn2c.compile_file("specs/rnn.rpn", params={"hidden": 16})
    assert model(torch.randn(2, 5, 8)).shape == (2, 4)
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check_file("specs/rnn.rpn", params={"hiden": 16})
    assert info.value.diagnostics[0].code == "E0302" and "hidden" in str(info.value)
    with pytest.raises(rpn2c.SpecError):
        rpn2c.check_file("specs/rnn.rpn", params={"hidden": object()})


def test_hyper_parameters_added_later_leave_the_content_hash_of_older_specs():
    """gelu's `approximate` and the patch pools' `ceil_mode` came after specs were hashed (and checkpoints
    written): at their default they are not part of the canonical form; set, they are."""
    plain = "model m {\n  input x: vector[B, 4]\n  y = head(x) { out = 3  post = [%s] }\n  return y\n}\n"
    default, tanh = (rpn2c.check(plain % act) for act in ("gelu", 'gelu(approximate = "tanh")'))
    assert "approximate" not in str(default.canonical()) and "approximate" in str(tanh.canonical())
    assert default.content_hash() != tanh.content_hash()
    assert rpn2c.check(plain % 'gelu(approximate = "none")').content_hash() == default.content_hash()
