"""rpn2c::<kernel>: torch's fused LSTM/GRU/RNN as opaque ops whose backward replays the forward's tape or
recomputes; the choices of the kernel's train flag and of the compiled route."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from rpn2c.functional import rnn_op

MODULES = {"lstm": (nn.LSTM, {}), "gru": (nn.GRU, {}), "rnn_tanh": (nn.RNN, {}),
           "rnn_relu": (nn.RNN, {"nonlinearity": "relu"})}


def _module(kernel="lstm", layers=2, bidirectional=True):
    """A torch module of ``kernel`` and initial states ``hx`` (``[h0]`` or ``[h0, c0]``) requiring gradients."""
    torch.manual_seed(0)
    cls, extra = MODULES[kernel]
    m = cls(5, 7, num_layers=layers, batch_first=True, bidirectional=bidirectional, **extra).double()
    states = layers * (2 if bidirectional else 1)
    hx = [torch.randn(states, 3, 7, dtype=torch.float64, requires_grad=True)
          for _ in range(2 if kernel == "lstm" else 1)]
    return m, hx


def _grads(out, leaves, g):
    return torch.autograd.grad(out, leaves, g)


@pytest.mark.parametrize("record", [False, True], ids=["recompute", "tape"])
@pytest.mark.parametrize("layers, bidirectional", [(1, False), (2, True)])
@pytest.mark.parametrize("kernel", sorted(MODULES))
def test_outputs_and_every_gradient_equal_the_torch_module(kernel, record, layers, bidirectional):
    m, hx = _module(kernel, layers, bidirectional)
    x = torch.randn(3, 6, 5, dtype=torch.float64, requires_grad=True)
    w = list(m._flat_weights)
    want = m(x, tuple(hx) if kernel == "lstm" else hx[0])[0]
    have = rnn_op.OPS[kernel][0](x, hx, w, True, layers, bidirectional, record)
    assert_close(have, want, rtol=0, atol=0)
    assert have.is_contiguous()
    g = torch.randn_like(want)
    before = len(rnn_op._TAPES)
    for a, b in zip(_grads(have, [x, *hx, *w], g), _grads(want, [x, *hx, *w], g)):
        assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert len(rnn_op._TAPES) == before - record  # a tape is consumed by its backward


def test_a_tape_is_replayed_only_for_the_tensors_it_was_recorded_on():
    """Weights changed in place after the forward (new version counter): the backward recomputes with them."""
    m, hx = _module()
    hx = [h.detach() for h in hx]
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    w = [p.detach().clone() for p in m._flat_weights]
    out = rnn_op.lstm(x, hx, w, True, 2, True, True)
    with torch.no_grad():
        w[0].add_(0.5)
    g = torch.randn_like(out)
    got = rnn_op.lstm_backward(g, out, x, hx, w, True, 2, True)
    leaves = [t.clone().requires_grad_() for t in (x, *hx, *w)]
    ref = torch._VF.lstm(leaves[0], (leaves[1], leaves[2]), leaves[3:], True, 2, 0.0, False, True, True)[0]
    for a, b in zip(got, torch.autograd.grad(ref, leaves, g)):
        assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_forwards_without_backward_keep_a_bounded_number_of_tapes():
    m, hx = _module("gru", 1, False)
    w = [p.detach() for p in m._flat_weights]
    outs = [rnn_op.gru(torch.randn(3, 6, 5, dtype=torch.float64), [hx[0].detach()], w, True, 1, False, True)
            for _ in range(rnn_op._KEEP + 3)]
    assert len(outs) == rnn_op._KEEP + 3 and len(rnn_op._TAPES) <= rnn_op._KEEP


@pytest.mark.parametrize("kernel", ["lstm", "gru"])
def test_both_ops_pass_opcheck(kernel):
    m, hx = _module(kernel)
    x = torch.randn(3, 6, 5, dtype=torch.float64, requires_grad=True)
    w = [p.detach().requires_grad_() for p in m._flat_weights]
    for record in (False, True):
        torch.library.opcheck(getattr(torch.ops.rpn2c, kernel).default, (x, hx, w, True, 2, True, record))
    x, hx, w = x.detach(), [h.detach() for h in hx], [p.detach() for p in w]
    out = rnn_op.OPS[kernel][0](x, hx, w, True, 2, True, False)
    torch.library.opcheck(getattr(torch.ops.rpn2c, f"{kernel}_backward").default,
                          (torch.randn_like(out), out, x, hx, w, True, 2, True))


def test_an_accelerator_kernel_differentiated_in_eval_mode_runs_its_training_form():
    """cuDNN has no backward for its inference form: on a non-CPU device a gradient asks for train=True (the
    module passes dropout 0 outside training, so the values are the same); CPU keeps the module's mode."""
    assert rnn_op.kernel_train(False, "cuda", grad=True)
    assert not rnn_op.kernel_train(False, "cuda", grad=False)
    assert not rnn_op.kernel_train(False, "cpu", grad=True)
    assert rnn_op.kernel_train(True, "cpu", grad=False) and rnn_op.kernel_train(True, "cuda", grad=False)


@pytest.mark.parametrize("kernel, device, dtype, grad, route", [
    ("lstm", "cpu", torch.float32, False, "native"),  # oneDNN's mkldnn_rnn_layer survives AOTAutograd
    ("lstm", "cpu", torch.bfloat16, False, "native"),
    ("lstm", "cpu", torch.float32, True, "opaque"),  # pytorch/pytorch#158007
    ("lstm", "cpu", torch.float64, False, "opaque"),  # no oneDNN kernel: decomposed into time steps
    ("lstm", "cuda", torch.float32, False, "opaque"),  # cuDNN: decomposed into time steps
    ("gru", "cpu", torch.float32, False, "opaque"),
    ("gru", "cuda", torch.float16, True, "opaque"),
    ("rnn_tanh", "cuda", torch.float32, False, "opaque"),
])
def test_the_compiled_route_keeps_a_kernel_wherever_the_compiler_would_unroll_it(kernel, device, dtype, grad,
                                                                                  route):
    assert rnn_op.compiled_route(kernel, device, dtype, grad) == route


BF16_LSTM = "oneDNN has no bfloat16 LSTM on this CPU (it needs AVX-512); rpn2c falls back to float32 there"


def test_the_op_runs_in_its_inputs_dtype_under_autocast():
    """Autocast is off inside the op, so its output dtype is the fake implementation's (the input's)."""
    m, hx = _module("lstm", 1, False)
    w = [p.detach().float() for p in m._flat_weights]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = rnn_op.lstm(torch.randn(3, 6, 5), [h.detach().float() for h in hx], w, True, 1, False, False)
    assert out.dtype == torch.float32


@pytest.mark.skipif(not rnn_op._onednn_runs(torch.bfloat16), reason=BF16_LSTM)
def test_torch_s_autocast_runs_the_cpu_lstm_in_bfloat16():
    """The premise of :func:`rnn_op.autocast_dtype` for oneDNN's LSTM: eager autocast casts it."""
    m, _ = _module("lstm", 1, False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m.float()(torch.randn(3, 6, 5))[0].dtype == torch.bfloat16


@pytest.mark.parametrize("kernel, device, dtype, autocast, lacks, want", [
    ("lstm", "cpu", torch.float32, torch.bfloat16, True, torch.bfloat16),  # oneDNN would be sent bfloat16
    ("lstm", "cpu", torch.float32, torch.float16, True, torch.float16),
    ("lstm", "cpu", torch.float32, torch.bfloat16, False, None),  # the CPU runs it
    ("lstm", "cpu", torch.bfloat16, torch.bfloat16, True, None),  # a bfloat16 input takes torch's native kernel
    ("lstm", "cpu", torch.float64, torch.bfloat16, True, None),  # autocast leaves float64 alone
    ("lstm", "cpu", torch.float32, None, True, None),  # autocast off
    ("gru", "cpu", torch.float32, torch.bfloat16, True, None),  # the CPU GRU/RNN: not autocast
    ("lstm", "cuda", torch.float32, torch.bfloat16, True, None),
])
def test_the_cpu_fallback_is_taken_exactly_where_onednn_would_be_sent_a_dtype_it_lacks(
        monkeypatch, kernel, device, dtype, autocast, lacks, want):
    for low in (torch.bfloat16, torch.float16):
        monkeypatch.setitem(rnn_op._ONEDNN_RUNS, low, not lacks)
    assert rnn_op.cpu_fallback(kernel, device, dtype, autocast) == want


def test_the_onednn_probe_answers_the_same_as_torch_s_own_check_and_is_asked_once(monkeypatch):
    monkeypatch.setattr(rnn_op, "_ONEDNN_RUNS", {})
    assert rnn_op._onednn_runs(torch.bfloat16) is torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert rnn_op._onednn_runs(torch.float16) is torch.ops.mkldnn._is_mkldnn_fp16_supported()
    assert rnn_op._onednn_runs(torch.float32) is True  # autocast to float32: nothing to fall back from
    assert set(rnn_op._ONEDNN_RUNS) == {torch.bfloat16, torch.float16, torch.float32}


@pytest.mark.parametrize("kernel, device, dtype, autocast, want", [
    ("lstm", "cuda", torch.float32, torch.bfloat16, torch.float16),  # cuDNN's RNNs: float16 under any autocast
    ("gru", "cuda", torch.bfloat16, torch.bfloat16, torch.float16),
    ("lstm", "cpu", torch.float32, torch.bfloat16, torch.bfloat16),  # oneDNN's LSTM: the autocast dtype
    ("gru", "cpu", torch.float32, torch.bfloat16, torch.float32),  # CPU GRU/RNN: the input's dtype
    ("rnn_tanh", "cpu", torch.bfloat16, torch.bfloat16, torch.bfloat16),
    ("lstm", "cuda", torch.float64, torch.float16, None),  # autocast leaves float64 alone
    ("lstm", "cuda", torch.float32, None, None),  # autocast off
])
def test_the_op_is_fed_the_dtype_eager_autocast_runs_the_kernel_in(kernel, device, dtype, autocast, want):
    assert rnn_op.autocast_dtype(kernel, device, dtype, autocast) == want


def test_exporting_is_true_under_torch_export_only():
    """The flag that keeps torch's own kernel in an exported program: False eagerly and under torch.compile
    (dynamo before torch 2.13 folds ``torch.compiler.is_exporting()`` to True there), True under torch.export."""

    class Probe(torch.nn.Module):
        def forward(self, x):
            return x + 1 if rnn_op.exporting() else x - 1

    x = torch.zeros(2)
    assert Probe()(x).tolist() == [-1.0, -1.0]
    torch._dynamo.reset()
    assert torch.compile(Probe(), fullgraph=True, backend="eager")(x).tolist() == [-1.0, -1.0]
    assert torch.export.export(Probe(), (x,)).module()(x).tolist() == [1.0, 1.0]


def test_backward_returns_share_no_storage_with_each_other_or_the_inputs():
    """A custom op may not return aliases: views of one flat gradient buffer (cuDNN's weight gradients) and an
    input passed through are copied, each value kept; a tensor of its own is returned as it is."""
    flat = torch.arange(12.0)
    given = torch.ones(3)
    own = torch.full((2,), 7.0)
    out = rnn_op.unaliased([flat[:6].view(2, 3), flat[6:], given, own], (given,))
    assert [t.tolist() for t in out] == [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], list(range(6, 12)), [1.0] * 3, [7.0] * 2]
    storages = [t.untyped_storage().data_ptr() for t in out] + [given.untyped_storage().data_ptr()]
    assert len(set(storages)) == len(storages)
    assert out[0].untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()  # the first view is kept
    assert out[3] is own
