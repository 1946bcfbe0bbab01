"""from_torch on nn.RNN / nn.GRU / nn.LSTM -> the exact ``recurrent`` construct (not the paper's chain layer).

RPN 2 recipe checked here: per gate an input head x_t W_ihᵀ + b_ih and a state head h_{t-1} W_hhᵀ + b_hh, the state
reaching step t through a chain instance ξ over the layer's own output, combined by the cell (torch gate order;
GRU in torch's reset-after form). Parameters keep torch's names, so the weight transfer is a renaming.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from unification_helpers import assert_matches_torch, compile_or_skip, n_examples, rand

import rpn2c

CELLS = {"rnn": lambda *a, **k: nn.RNN(*a, **k), "rnn_relu": lambda *a, **k: nn.RNN(*a, nonlinearity="relu", **k),
         "gru": nn.GRU, "lstm": nn.LSTM}


@st.composite
def rnn_cases(draw):
    cell = draw(st.sampled_from(sorted(CELLS)))
    f, h, layers = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 2))
    bi, bias, bf = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    b, t = draw(st.integers(1, 2)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**16))
    torch.manual_seed(seed)
    m = CELLS[cell](f, h, num_layers=layers, bidirectional=bi, bias=bias, batch_first=bf,
                    dropout=draw(st.sampled_from([0.0, 0.3])) if layers > 1 else 0.0).double()
    x = rand(b, t, f, seed=seed + 1, scale=1.5)
    args = [x if bf else x.transpose(0, 1).contiguous()]
    if draw(st.booleans()):
        s = layers * (2 if bi else 1)
        h0 = rand(s, b, h, seed=seed + 2)
        args.append((h0, rand(s, b, h, seed=seed + 3)) if cell == "lstm" else h0)
    return m, tuple(args)


@settings(max_examples=n_examples(30), deadline=None)
@given(rnn_cases())
def test_recurrent_modules_match_torch(case):
    """RNN (tanh/relu), GRU, LSTM: layers, bidirectional, bias, batch_first both, given h0/c0: `output` and
    parameter gradients equal torch's, in both lowerings (reference = the materialised chain feedback)."""
    m, args = case
    spec = assert_matches_torch(m, args)
    assert all(spec.links[k].source == k.split(".", 1)[1] for k in spec.links)  # torch names kept


@settings(max_examples=n_examples(12), deadline=None)
@given(st.sampled_from(sorted(CELLS)), st.integers(2, 6), st.integers(0, 2**16), st.data())
def test_unidirectional_recurrence_is_causal(cell, t, seed, data):
    """The compiled recurrence's output at step i does not depend on inputs after i (and does on later ones)."""
    torch.manual_seed(seed)
    m = CELLS[cell](3, 4, num_layers=2, batch_first=True).double()
    x = rand(2, t, 3, seed=seed)
    spec = rpn2c.from_torch(m, (x,))
    i = data.draw(st.integers(0, t - 2))
    x2 = x.clone()
    x2[:, i + 1:] += rand(2, t - i - 1, 3, seed=seed + 1)
    for reference in (False, True):
        model = compile_or_skip(spec, reference)
        y1, y2 = model(x), model(x2)
        torch.testing.assert_close(y1[:, :i + 1], y2[:, :i + 1])
        if cell != "rnn_relu":  # a relu cell may be dead (all zeros) on both inputs
            assert not torch.allclose(y1[:, i + 1:], y2[:, i + 1:])


def test_recurrent_spec_text():
    m = nn.LSTM(3, 5, num_layers=2, bidirectional=True).double()
    x = rand(4, 2, 3)
    spec = rpn2c.from_torch(m, (x, (rand(4, 2, 5), rand(4, 2, 5))))
    assert spec.input_names == ["x", "h0", "c0"]
    for line in ("input x: time_major[T, B, 3]", "input h0: state[4, B, 5]", "cell = lstm", "layers = 2",
                 "bidirectional = true", "state = h0", "cell_state = c0", "time_major(rnn)"):
        assert line in spec.text, line
    assert spec.output == "output"
