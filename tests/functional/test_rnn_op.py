"""rpn2c::lstm: torch's fused LSTM as an opaque op whose backward replays the forward's tape or recomputes."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from rpn2c.functional import rnn_op


def _lstm(layers=2, bidirectional=True):
    torch.manual_seed(0)
    m = nn.LSTM(5, 7, num_layers=layers, batch_first=True, bidirectional=bidirectional).double()
    states = layers * (2 if bidirectional else 1)
    h0 = torch.randn(states, 3, 7, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(states, 3, 7, dtype=torch.float64, requires_grad=True)
    return m, h0, c0


def _grads(out, leaves, g):
    return torch.autograd.grad(out, leaves, g)


@pytest.mark.parametrize("record", [False, True], ids=["recompute", "tape"])
@pytest.mark.parametrize("layers, bidirectional", [(1, False), (2, True)])
def test_outputs_and_every_gradient_equal_nn_lstm(record, layers, bidirectional):
    m, h0, c0 = _lstm(layers, bidirectional)
    x = torch.randn(3, 6, 5, dtype=torch.float64, requires_grad=True)
    w = list(m._flat_weights)
    want = m(x, (h0, c0))[0]
    have = rnn_op.lstm(x, h0, c0, w, True, layers, bidirectional, record)
    assert_close(have, want, rtol=0, atol=0)
    assert have.is_contiguous()
    g = torch.randn_like(want)
    before = len(rnn_op._TAPES)
    for a, b in zip(_grads(have, [x, h0, c0, *w], g), _grads(want, [x, h0, c0, *w], g)):
        assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert len(rnn_op._TAPES) == before - record  # a tape is consumed by its backward


def test_a_tape_is_replayed_only_for_the_tensors_it_was_recorded_on():
    """Weights changed in place after the forward (new version counter): the backward recomputes with them."""
    m, h0, c0 = _lstm()
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    w = [p.detach().clone() for p in m._flat_weights]
    out = rnn_op.lstm(x, h0.detach(), c0.detach(), w, True, 2, True, True)
    with torch.no_grad():
        w[0].add_(0.5)
    g = torch.randn_like(out)
    got = rnn_op.lstm_backward(g, out, x, h0.detach(), c0.detach(), w, True, 2, True)
    leaves = [t.clone().requires_grad_() for t in (x, h0.detach(), c0.detach(), *w)]
    ref = torch._VF.lstm(leaves[0], (leaves[1], leaves[2]), leaves[3:], True, 2, 0.0, False, True, True)[0]
    for a, b in zip(got, torch.autograd.grad(ref, leaves, g)):
        assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_forwards_without_backward_keep_a_bounded_number_of_tapes():
    m, h0, c0 = _lstm(1, False)
    w = [p.detach() for p in m._flat_weights]
    outs = [rnn_op.lstm(torch.randn(3, 6, 5, dtype=torch.float64), h0.detach(), c0.detach(), w, True, 1, False,
                        True) for _ in range(rnn_op._KEEP + 3)]
    assert len(outs) == rnn_op._KEEP + 3 and len(rnn_op._TAPES) <= rnn_op._KEEP


def test_both_ops_pass_opcheck():
    m, h0, c0 = _lstm()
    x = torch.randn(3, 6, 5, dtype=torch.float64, requires_grad=True)
    w = [p.detach().requires_grad_() for p in m._flat_weights]
    for record in (False, True):
        torch.library.opcheck(torch.ops.rpn2c.lstm.default, (x, h0, c0, w, True, 2, True, record))
    out = rnn_op.lstm(x.detach(), h0.detach(), c0.detach(), [p.detach() for p in w], True, 2, True, False)
    torch.library.opcheck(torch.ops.rpn2c.lstm_backward.default,
                          (torch.randn_like(out), out, x.detach(), h0.detach(), c0.detach(),
                           [p.detach() for p in w], True, 2, True))
