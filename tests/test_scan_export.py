"""Recurrences under ``torch.export`` with a symbolic time length: the parallel scans' Hillis–Steele rounds in
``torch.while_loop`` (``functional/scan.py``) give the step loop's states for every length, eagerly and in the
exported program, which takes lengths it was not traced at (odd ones, longer and shorter ones); the fused
kernels' and the time loop's steps export as one ``torch.scan`` per layer and direction (``lower/recurrent.py``)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.export import Dim
from torch.testing import assert_close

import rpn2c
from rpn2c.functional import scan
from tests.test_lowering_equivalence import _n, _rand
from tests.test_recurrent import _recurrent_text

KINDS = ["scalar", "diagonal", "dense", "complex", "varying", "varying_complex"]


def _case(kind: str, b: int, t: int, s: int, seed: int):
    """(u, a) of a recurrence of ``kind``: a constant A (0-d, [S], [S, S], complex [S]) or a per-step a [B, T, S]."""
    g = torch.Generator().manual_seed(seed)
    u = _rand(b, t, s, seed=seed)
    if kind == "scalar":
        return u, torch.tensor(0.9, dtype=torch.float64)
    if kind in ("diagonal", "complex"):
        a = 0.2 + 0.75 * torch.rand(s, generator=g, dtype=torch.float64)
        if kind == "complex":
            return torch.complex(u, _rand(b, t, s, seed=seed + 1)), torch.polar(a, torch.rand(s, generator=g).double())
        return u, a
    if kind == "dense":
        q, _ = torch.linalg.qr(torch.randn(s, s, generator=g, dtype=torch.float64))
        return u, 0.9 * q
    a = 0.2 + 0.85 * torch.rand(b, t, s, generator=g, dtype=torch.float64)
    if kind == "varying_complex":
        return torch.complex(u, _rand(b, t, s, seed=seed + 1)), torch.polar(a, _rand(b, t, s, seed=seed + 2))
    return u, a


def _steps(u, a, h0=None):
    """``h_t = A h_{t−1} + u_t`` one step at a time."""
    h = torch.zeros_like(u[:, 0]) if h0 is None else h0
    outs = []
    for t in range(u.shape[1]):
        h = (a[:, t] * h if a.dim() == 3 else h @ a.transpose(-1, -2) if a.dim() == 2 else a * h) + u[:, t]
        outs.append(h)
    return torch.stack(outs, 1)


def _scan(u, a, h0=None):
    return scan.varying_scan(u, a, h0) if a.dim() == 3 else scan.linear_scan(u, a, h0)


class _Scan(torch.nn.Module):
    def forward(self, u, a, h0):
        return _scan(u, a, h0)


@given(kind=st.sampled_from(KINDS), t=st.integers(1, 40), s=st.integers(1, 3), with_h0=st.booleans(),
       seed=st.integers(0, 99))
@settings(max_examples=_n(40), deadline=None)
def test_the_rounds_a_trace_keeps_equal_the_step_loop_for_every_length(kind, t, s, with_h0, seed):
    """The rounds a trace keeps, run eagerly (as if the length were symbolic), for lengths that are not powers of
    two."""
    u, a = _case(kind, 2, t, s, seed)
    h0 = _rand(2, s, seed=seed + 5).to(u.dtype) if with_h0 else None
    with mock.patch.object(scan, "symbolic", lambda n: True):
        got = _scan(u, a, h0)
    assert_close(got, _steps(u, a, h0), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", [k if k != "scalar" else pytest.param(k, marks=pytest.mark.slow) for k in KINDS])
def test_an_exported_scan_takes_any_length(kind):
    u, a = _case(kind, 2, 8, 3, seed=1)
    h0 = _rand(2, 3, seed=2).to(u.dtype)
    time = {0: Dim.AUTO, 1: Dim.AUTO} if a.dim() == 3 else None
    program = torch.export.export(_Scan(), (u, a, h0), dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO}, time, {0: Dim.AUTO}))
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "while_loop" in ops  # the rounds stay a loop: no length was baked in
    run = program.module()
    for b, t in ((1, 1), (3, 2), (2, 5), (2, 9), (1, 33)):  # never the traced (2, 8)
        u, a = _case(kind, b, t, 3, seed=t)
        h0 = _rand(b, 3, seed=t + 1).to(u.dtype)
        assert_close(run(u, a, h0), _steps(u, a, h0), rtol=1e-10, atol=1e-10)


def test_eager_and_static_shapes_keep_the_python_rounds():
    """Outside an export trace (and for a static length) the scan is the plain log-depth loop: no while_loop."""
    u, a = _case("diagonal", 2, 8, 3, seed=0)
    program = torch.export.export(_Scan(), (u, a, None))
    assert not any("while_loop" in str(n.target) for n in program.graph.nodes)
    with mock.patch.object(scan, "_traced_rounds", side_effect=AssertionError("not eager")):
        assert_close(scan.linear_scan(u, a), _steps(u, a), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cell,bi,layers,extra,plan", [
    ("lstm", True, 1, "", "fused_recurrent"),  # torch's kernel eagerly; in the program, torch.scan per direction
    pytest.param("gru", False, 2, "", "fused_recurrent", marks=pytest.mark.slow),  # 2 layers: specs/rnn.rpn too
    ("rnn", True, 1, "kappa_state = chebyshev(d = 2)", "time_loop")])  # the loop form
def test_an_exported_step_loop_takes_any_length(cell, bi, layers, extra, plan):
    torch.manual_seed(0)
    model = rpn2c.compile(_recurrent_text(cell, 3, 4, layers, bi, True, False, True, extra)).double().eval()
    assert model.graph.node("y").plan == [plan]
    s = layers * (2 if bi else 1)
    x, h0, c0 = torch.randn(2, 8, 3).double(), torch.randn(s, 2, 4).double(), torch.randn(s, 2, 4).double()
    args = (x, h0, c0) if cell == "lstm" else (x, h0)
    dims = ({0: Dim.AUTO, 1: Dim.AUTO},) + ({1: Dim.AUTO},) * (len(args) - 1)  # states are [S, B, H]
    program = torch.export.export(model, args, dynamic_shapes=(dims,))
    assert any("scan" in str(n.target) for n in program.graph.nodes)  # not unrolled over the traced 8 steps
    # decomposed too (the ONNX conversion decomposes first): the fused kernel's weights are views of one flat
    # buffer, and the operator's functionalisation refused them as inputs sharing storage
    runs = (program.module(), program.run_decompositions().module())
    for b, t in ((1, 1), (3, 5), (2, 13)):
        x, h0, c0 = torch.randn(b, t, 3).double(), torch.randn(s, b, 4).double(), torch.randn(s, b, 4).double()
        args = (x, h0, c0) if cell == "lstm" else (x, h0)
        for run in runs:
            assert_close(run(*args), model(*args), rtol=1e-10, atol=1e-10)


def test_a_step_reading_kappa_state_tensors_gets_them_as_inputs():
    """κ_state's buffers (and parameters) reach the exported step as operator inputs, not baked-in constants: the
    program follows a change of them made after the export's weights were taken."""
    from rpn2c.components.impl.kappa import CallModule

    torch.manual_seed(0)
    model = rpn2c.compile(_recurrent_text("rnn", 3, 4, 1, False, True, False, False,
                                          "kappa_state = chebyshev(d = 2)")).double().eval()
    model.y.kappa_state[0] = CallModule(lambda h, scale: torch.cat([h, h * scale], -1),
                                        {"scale": torch.tensor(0.5, dtype=torch.float64)})
    program = torch.export.export(model, (torch.randn(2, 8, 3).double(),),
                                  dynamic_shapes=(({0: Dim.AUTO, 1: Dim.AUTO},),))
    assert "scale" in " ".join(program.graph_signature.inputs_to_buffers.values())
    x = torch.randn(3, 6, 3).double()
    assert_close(program.module()(x), model(x), rtol=1e-10, atol=1e-10)


class _ComplexScan(torch.nn.Module):
    """The complex diagonal scan from real inputs (ONNX takes no complex ones), out as real and imaginary parts."""

    def forward(self, re, im, radius, phase):
        h = scan.linear_scan(torch.complex(re, im), torch.polar(radius, phase))
        return torch.cat([h.real, h.imag], -1)


def _onnx_case(kind: str, b: int, t: int, seed: int):
    """The inputs of the ONNX test's module: (Re u, Im u, |λ|, arg λ) or (u, a), float32."""
    u, a = (x.to(torch.complex64 if x.is_complex() else torch.float32) for x in _case(kind, b, t, 3, seed))
    return (u.real, u.imag, a.abs(), a.angle()) if kind == "complex" else (u, a)


@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime")),
                    reason="onnx, onnxscript and onnxruntime not installed (pip install 'rpn2c[export]')")
@pytest.mark.parametrize("kind", ["complex", "varying"])
def test_an_onnx_scan_takes_any_length(kind, tmp_path):
    """ONNX's Loop over the rounds, complex states included, run by onnxruntime at another length."""
    from rpn2c.runtime.export_onnx import onnx_runner, save_onnx

    module = _ComplexScan() if kind == "complex" else _Scan()
    names = ["re", "im", "radius", "phase"] if kind == "complex" else ["u", "a"]
    time = {0: Dim.AUTO, 1: Dim.AUTO}
    dims = (time, time, None, None) if kind == "complex" else (time, time, None)
    args = _onnx_case(kind, 2, 8, seed=1) + (() if kind == "complex" else (None,))
    save_onnx(torch.export.export(module, args, dynamic_shapes=dims), tmp_path / "s.onnx",
              SimpleNamespace(inputs=names, outputs=["h"]))
    inputs = _onnx_case(kind, 3, 13, seed=2)
    want = module(*inputs, *(() if kind == "complex" else (None,)))
    assert_close(onnx_runner(tmp_path / "s.onnx")(inputs)[0], want, rtol=1e-4, atol=1e-4)
