"""A float64 ONNX export is float64 throughout: every processing entry (the elementwise activations among them) and
every expansion κ of the registry (found by ``all_entries``: a new entry is covered with no change here), exported
to ONNX in float64 and run in onnxruntime, equals the module at the export's float64 tolerance. The converter
writes a Python number as a float32 constant and onnxruntime runs some activations in float32 only
(``rpn2c.runtime.export_float64``): before the rewrites, ``2π/P`` in a Fourier κ, selu's and leaky_relu's
constants, softshrink's λ and gelu's √(2/π) differed by 1e-9 to 1e-7.

The examples sharing their inputs' types run as one module (one export per group of the family, each output
compared with its own entry's module; the CI suite exports a subset covering each rewrite, ``-m slow`` all). The
operators onnxruntime has no float64 kernel for (Erf, Atan, Asin, Acos) go out as arithmetic: no entry is refused.
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rpn2c
from rpn2c.components.registry import all_entries
from rpn2c.runtime.cli import main
from rpn2c.runtime.export_cli import example_inputs
from rpn2c.runtime.export_write import TOLERANCE, difference

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))
pytestmark = pytest.mark.skipif(not HAS_ONNX, reason="onnx, onnxscript and onnxruntime not installed "
                                                     "(pip install 'rpn2c[export]')")

FAMILIES = ("processing", "expansion")
ENTRIES = {f"{e.family}:{e.name}": e for e in all_entries() if e.family in FAMILIES and not e.compile_limitation}
# entries needing an operator onnxruntime has no float64 kernel for, with no exact form in arithmetic: the export
# names it (may only shrink)


class _Together(torch.nn.Module):
    """Several models on the same inputs, their outputs in one tuple."""

    def __init__(self, models):
        super().__init__()
        self.models = torch.nn.ModuleList(models)

    def forward(self, *xs):
        outs = []
        for m in self.models:
            y = m(*xs)
            outs.extend(y if isinstance(y, tuple) else (y,))
        return tuple(outs)


# the CI suite's subset: an entry for each rewrite (a number as a float64 tensor through each route, the arithmetic
# forms of the activations and functions onnxruntime runs in float32 only); `-m slow` exports every entry
IN_CI = {"processing:" + n for n in ("selu", "leaky_relu", "gelu", "prelu", "softshrink", "layer_norm")} | {
    "expansion:" + n for n in ("fourier", "hyperbolic", "arc_hyperbolic", "arc_trigonometric", "shannon_wavelet",
                               "probabilistic_normal")}


def _groups(family: str, every: bool) -> dict[tuple, list[str]]:
    """The family's exportable entries (``every``: else those in ``IN_CI``) by the types of their example's inputs."""
    out: dict[tuple, list[str]] = {}
    for key, e in ENTRIES.items():
        if e.family == family and (every or key in IN_CI):
            graph = rpn2c.check(e.example)
            out.setdefault(tuple(str(graph.node(n).type) for n in graph.inputs), []).append(key)
    return out


@pytest.mark.parametrize("family, every", [pytest.param(f, every, id=f"{f}-{'all' if every else 'ci'}",
                                                        marks=[pytest.mark.slow] if every else [])
                                           for f in FAMILIES for every in (False, True)])
def test_every_entry_exports_to_onnx_in_float64_and_equals_the_module(tmp_path, family, every):
    from rpn2c.runtime.export_onnx import onnx_runner, save_onnx

    groups = _groups(family, every)
    exported = sum(map(len, groups.values()))
    assert exported == sum(e.family == family for e in ENTRIES.values()) \
        if every else exported == sum(k.startswith(family) for k in IN_CI)
    for i, keys in enumerate(groups.values()):
        torch.manual_seed(0)
        models = [rpn2c.compile(ENTRIES[k].example).double().eval() for k in keys]
        graph = models[0].graph
        inputs, _ = example_inputs(graph, {"B": 3}, dtype=torch.float64, seed=1)
        with torch.no_grad():
            want = [m(*inputs) for m in models]
        program = torch.export.export(_Together(models).eval(), inputs)
        names = [f"y{j}" for j in range(len(models))]
        path = tmp_path / f"{family}{i}.onnx"
        save_onnx(program, path, SimpleNamespace(inputs=list(graph.inputs), outputs=names))
        got = onnx_runner(path)(inputs)
        assert len(got) == len(want)
        differ = {key: difference(a, b) for key, a, b in zip(keys, want, got)}
        assert not {k: d for k, d in differ.items() if not d <= TOLERANCE["float64"]}


@pytest.mark.parametrize("name", ["erf", "atan", "asin", "acos"])
@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=40),
       inside=st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=40))
def test_the_arithmetic_forms_are_torchs_functions_to_the_last_bits(name, values, inside):
    """Cephes' rational forms, which a float64 ONNX computes erf, atan, asin and acos with (onnxruntime has no
    float64 kernels for them), against torch's: within 1e-15 relative, NaN where torch's is NaN."""
    from rpn2c.runtime import export_float64

    x = torch.tensor(values + inside, dtype=torch.float64)
    want, got = getattr(torch, name)(x), getattr(export_float64, f"_{name}")(x)
    assert torch.equal(want.isnan(), got.isnan())
    ok = ~want.isnan()
    assert torch.all((got[ok] - want[ok]).abs() <= 1e-15 * want[ok].abs() + 1e-300)


def test_the_exact_gelu_goes_out_in_float64_without_erf(tmp_path, capsys):
    """onnxruntime has no float64 Erf: the exact GELU's erf goes out as arithmetic, and the file computes the
    model's float64 outputs (the export's own check on fresh inputs, and here again at other sizes)."""
    import onnx

    text = ENTRIES["processing:gelu"].example.replace('gelu(approximate = "tanh")', "gelu")
    spec, out = tmp_path / "m.rpn", tmp_path / "m.onnx"
    spec.write_text(text, encoding="utf-8")
    assert main(["export", str(spec), "--random-init", "--format", "onnx", "--dtype", "float64",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    assert "Erf" not in {n.op_type for n in onnx.load(str(out)).graph.node}
    from rpn2c.runtime.export_onnx import onnx_runner, save_onnx

    torch.manual_seed(0)
    model = rpn2c.compile(text).double().eval()
    inputs, _ = example_inputs(model.graph, {"B": 7}, dtype=torch.float64, seed=3)
    inputs = tuple(x * 16 for x in inputs)  # across erf's three ranges (|x/√2| ≤ 1, < 8, ≥ 8)
    with torch.no_grad():
        want = model(*inputs)
    path = tmp_path / "direct.onnx"
    save_onnx(torch.export.export(model, inputs), path, SimpleNamespace(inputs=list(model.graph.inputs),
                                                                        outputs=["y"]))
    assert difference(want, onnx_runner(path)(inputs)[0]) <= TOLERANCE["float64"]


@settings(max_examples=40, deadline=None)
@given(rank=st.integers(1, 3), groups=st.sampled_from([1, 2]), stride=st.integers(1, 3), padding=st.integers(0, 2),
       dilation=st.integers(1, 2), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_a_convolution_as_sliced_matrix_products_is_torchs(rank, groups, stride, padding, dilation, bias, seed):
    """onnxruntime has no float64 Conv: a float64 ONNX convolves as one matrix product per kernel tap, which equals
    torch's convolution for every stride, padding, dilation and grouping."""
    from rpn2c.runtime.export_float64 import _conv

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 4, *[7] * rank, generator=g, dtype=torch.float64)
    w = torch.randn(6, 4 // groups, *[3] * rank, generator=g, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64) if bias else None
    conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[rank - 1]
    want = conv(x, w, b, stride, padding, dilation, groups)
    got = _conv(x, w, b, stride, padding, dilation, groups)
    assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-13, atol=1e-13)


def test_a_cnn_goes_out_in_float64_without_conv(tmp_path, capsys):
    """A CNN (convolutions, pooling, a classifier) exports to float64 ONNX and passes the export's own check; no
    Conv node is left for onnxruntime to refuse."""
    import onnx

    out = tmp_path / "cnn.onnx"
    assert main(["export", "examples/specs/cnn_digits.rpn", "--random-init", "--format", "onnx", "--dtype",
                 "float64", "--out", str(out)]) == 0, capsys.readouterr().err
    assert "Conv" not in {n.op_type for n in onnx.load(str(out)).graph.node}


ATTENTION = """
model attention_scales {
  input x: sequence[B, 5, 6]
  one = head(x) {
    xi_instance = low_rank_bilinear(rank = 2)
    out = 3
  }
  many = head(x) {
    heads = 2
    xi_instance = low_rank_bilinear(rank = 3)
    out = 3
    fusion = concat_linear(out = 4)
  }
  causal = head(x) {
    heads = 3
    xi_instance = attention(rank = 5, causal = true)
    out = 2
    fusion = concat_linear(out = 4)
  }
  lphm = head(x) {
    xi_instance = lphm_bilinear
    out = 3
  }
  return one, many, causal, lphm
}
"""


def test_attention_with_a_scale_float32_rounds_exports_exactly_in_float64(tmp_path):
    """SDPA's ``scale`` (1/√2, 1/√3, 1/√5, lphm's 1/√6: none float32-exact) is a ``float`` argument the converter
    writes as a float32 constant; before the query took it as a float64 tensor these heads differed by 3e-9 to
    1e-8 (one head: SDPA lifted to 4-d; several heads; causal; the lphm ξ). Now as the module to rounding."""
    from rpn2c.runtime.export_onnx import onnx_runner, save_onnx

    torch.manual_seed(0)
    model = rpn2c.compile(ATTENTION).double().eval()
    inputs, _ = example_inputs(model.graph, {"B": 3}, dtype=torch.float64, seed=1)
    with torch.no_grad():
        want = model(*inputs)
    path = tmp_path / "attention.onnx"
    save_onnx(torch.export.export(model, inputs), path, model.graph)
    got = onnx_runner(path)(inputs)
    differ = {name: difference(a, b) for name, a, b in zip(model.graph.outputs, want, got)}
    assert len(differ) == 4 and all(d <= 1e-13 for d in differ.values()), differ


def test_a_tiny_epsilon_and_a_factor_near_one_survive_the_conversion(tmp_path):
    """The converter's optimiser took ``x + c`` for ``x`` when ``|c| ≤ 1e-8`` and ``x · c`` for ``x`` when
    ``|c − 1| ≤ 1e-5``: a LayerNorm's ε = 1e-12 vanished (a float64 ViT differed by 3e-10) and a factor 1.000005
    was dropped in float32 too. Rows of spread 1e-8 make ε decide the output."""
    from rpn2c.runtime.export_onnx import onnx_runner, save_onnx

    text = ("model m {\n  input x: vector[B, 16]\n  y = layer_norm(x, eps = 0.000000000001)\n  return y\n}\n")
    model = rpn2c.compile(text).double().eval()
    g = torch.Generator().manual_seed(0)
    x = 1e-8 * torch.randn(5, 16, generator=g, dtype=torch.float64)
    with torch.no_grad():
        want = model(x)
    path = tmp_path / "ln.onnx"
    save_onnx(torch.export.export(model, (x,)), path, SimpleNamespace(inputs=list(model.graph.inputs),
                                                                      outputs=["y"]))
    assert difference(want, onnx_runner(path)((x,))[0]) <= TOLERANCE["float64"]

    class NearOne(torch.nn.Module):
        def forward(self, x):
            return x * 1.000005 - 1e-9

    x = torch.rand(4, 8) + 1.0
    path = tmp_path / "near_one.onnx"
    save_onnx(torch.export.export(NearOne(), (x,)), path, SimpleNamespace(inputs=["x"], outputs=["y"]))
    got = onnx_runner(path)((x,))[0]
    torch.testing.assert_close(got, NearOne()(x), rtol=1e-7, atol=0)
