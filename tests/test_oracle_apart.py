"""The oracle is a lowering of its own: the default lowering never reads a lowering flag nor imports the oracle.

The reference lowering (``lower/oracle.py``, ``lower/reference.py``, ``lower/literal_forms.py``) is the one place
that materialises the paper's matrices. The default lowering's modules — the components, the functional maths and
``lower/``'s default path — name no ``reference`` (no flag, argument or attribute: no component takes
``reference=``) and import none of the oracle's modules; a default model built and run loads none of them. So the
differential tests compare two implementations that share no compute.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rpn2c"
ORACLE = ("rpn2c.lower.oracle", "rpn2c.lower.reference", "rpn2c.lower.literal_forms")
# the default lowering's modules: every component and maths module, and lower/'s default path (build.py is the
# switch between the two lowerings)
DEFAULT = sorted([*(PACKAGE / "components").rglob("*.py"), *(PACKAGE / "functional").rglob("*.py"),
                  *(PACKAGE / "lower" / f"{m}.py" for m in ("heads", "program", "emitters", "emit", "attention",
                                                            "parts", "recurrent"))])


def lowering_flags(source: str) -> list[str]:
    """Where ``source`` names the lowering (``reference`` as a name, attribute, argument or keyword) or imports the
    oracle, as ``line: what``."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == "reference" or \
                isinstance(node, ast.Attribute) and node.attr == "reference":
            hits.append(f"{node.lineno}: reads reference")
        elif isinstance(node, ast.arg) and node.arg == "reference" or \
                isinstance(node, ast.keyword) and node.arg == "reference":
            hits.append(f"{node.lineno}: takes reference")
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            hits += [f"{node.lineno}: imports {n}" for n in names if n in ORACLE]
        elif isinstance(node, ast.Import):
            hits += [f"{node.lineno}: imports {a.name}" for a in node.names if a.name in ORACLE]
    return hits


def test_the_default_lowering_names_no_lowering_flag_and_imports_no_oracle():
    found = {str(p.relative_to(ROOT)): h for p in DEFAULT if (h := lowering_flags(p.read_text(encoding="utf-8")))}
    assert found == {}


def test_the_flag_check_can_fail():
    src = textwrap.dedent("""
        from rpn2c.lower import reference as literal
        import rpn2c.lower.oracle
        def build(self, feat, reference=False):
            return Module(feat, reference=reference) if self.reference else None
    """)
    assert sorted(h.split(": ")[1] for h in lowering_flags(src)) == [
        "imports rpn2c.lower.oracle", "imports rpn2c.lower.reference", "reads reference", "reads reference",
        "takes reference", "takes reference"]


def test_a_default_model_built_and_run_loads_no_oracle_module():
    """Built, run and differentiated in the default lowering (grid heads and pooling, a graph, attention, a scan
    with its causal convolution, shifted windows with patch merges and an item readout, recurrent layers): none of
    the oracle's modules is imported; nor by a relation or a Hopfield update."""
    paths = [ROOT / "specs" / f"{s}.rpn" for s in ("cnn", "gcn", "transformer", "mamba_lm", "swin", "vit", "rnn")]
    texts = [p.read_text(encoding="utf-8") for p in paths] + [
        "model r {\n  input x: sequence[B, 5, 4]\n  input c: sequence[B, 6, 3]\n"
        "  r = relation(x, c, xi = attention(rank = 2))\n  y = apply(r, c)\n  return y\n}\n",
        "model h {\n  input x: vector[B, 8]\n  input p: sequence[B, 3, 8]\n  y = hopfield(x, p, steps = 2)\n"
        "  z = head(y) { out = 2 }\n  return z\n}\n"]
    code = textwrap.dedent(f"""
        import sys
        import rpn2c
        from tests.test_specs import random_inputs
        for text in {texts!r}:
            model = rpn2c.compile(text).double()
            out = model(*random_inputs(model.graph))
            out = out if isinstance(out, tuple) else (out,)
            sum(o.double().sum() for o in out if o.is_floating_point()).backward()
        print(sorted(m for m in sys.modules if m in {ORACLE!r}))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_every_literal_form_is_its_default_module_with_only_its_forward_replaced():
    """A literal form keeps the default module's construction (so one state_dict loads into both lowerings)."""
    from rpn2c.lower.literal_forms import FORMS

    assert len(FORMS) == 11
    for default, form in FORMS.items():
        assert form.__bases__ == (default,) and "__init__" not in vars(form), form
        assert "forward" in vars(form), form
        assert default.__module__.startswith("rpn2c.components.") or default.__module__ == "rpn2c.lower.recurrent"


RECURRENT = {  # cell, extra: the fused kernel, the step loop (κ_state expands), the scan (linear, selective)
    "lstm": "  layers = 2  bidirectional = true", "gru": "  kappa_state = chebyshev(d = 2)",
    "linear": "  bidirectional = true", "mingru": ""}


@pytest.mark.parametrize("cell", sorted(RECURRENT))
def test_the_literal_recurrence_runs_none_of_the_default_forms_and_agrees_with_them(cell, monkeypatch):
    """The oracle's recurrent layer loads the default's state_dict and, with every form of the default module
    (fused kernel, scan, step loop and their parts) raising, computes the same outputs and gradients in float64."""
    import torch

    import rpn2c
    from rpn2c.lower.recurrent import RecurrentModule

    text = (f"model r {{\n  input x: sequence[B, 5, 3]\n  y = recurrent(x) {{ cell = {cell}  out = 4"
            f"{RECURRENT[cell]} }}\n  return y\n}}\n")
    torch.manual_seed(0)
    fast = rpn2c.compile(text).double()
    ref = rpn2c.compile(text, reference=True).double()
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    want = fast(x)
    (want_grad,) = torch.autograd.grad(want.square().sum(), x)

    def forbidden(*_a, **_k):
        raise AssertionError("the oracle ran a default form")

    for name in ("fused", "scan", "loop", "_kernel", "_loop_direction", "_scan_direction", "_selective_direction",
                 "_directions", "_stack", "_input_gates"):
        monkeypatch.setattr(RecurrentModule, name, forbidden)
    got = ref(x)
    (got_grad,) = torch.autograd.grad(got.square().sum(), x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-9, atol=1e-11)
    with pytest.raises(AssertionError, match="default form"):
        fast(x)
