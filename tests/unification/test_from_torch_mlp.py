"""from_torch on perceptron stacks: nn.Linear (on vectors and on every item of a sequence), activations,
LayerNorm, BatchNorm1d (eval, running statistics), Dropout, Softmax/LogSoftmax, Flatten, nested Sequentials.

RPN 2 recipe checked here: a Linear layer is a head with ξ none, κ identity, ψ identity = W and a tied bias (RPN v1,
catalog §5.5); activations and norms are output processing (``post``) of the head before them.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from unification_helpers import assert_matches_torch, n_examples, rand

ACTIVATIONS = [nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.SiLU, nn.ELU, nn.LeakyReLU, nn.Softplus, nn.Identity,
               lambda: nn.Softmax(dim=-1), lambda: nn.LogSoftmax(dim=-1), lambda: nn.Dropout(0.3)]


def _randomise(module: nn.Module, seed: int) -> nn.Module:
    """Non-trivial affine weights and running statistics (defaults are 1/0, which would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d)):
                if getattr(m, "weight", None) is not None:
                    m.weight.copy_(torch.rand(m.weight.shape, generator=g, dtype=m.weight.dtype) + 0.5)
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g, dtype=m.bias.dtype))
                if getattr(m, "running_mean", None) is not None:
                    m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g, dtype=m.running_mean.dtype))
                    m.running_var.copy_(torch.rand(m.running_var.shape, generator=g, dtype=m.running_var.dtype) + 0.5)
    return module


@st.composite
def mlp_cases(draw):
    seq = draw(st.booleans())
    batch, t, width = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 5))
    shape = (batch, t, width) if seq else (batch, width)
    layers = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["linear", "linear", "act", "layer_norm", "batch_norm", "nested"]))
        if kind == "linear":
            out = draw(st.integers(1, 5))
            layers.append(nn.Linear(width, out, bias=draw(st.booleans())))
            width = out
        elif kind == "act":
            layers.append(draw(st.sampled_from(ACTIVATIONS))())
        elif kind == "layer_norm":
            layers.append(nn.LayerNorm(width, eps=draw(st.sampled_from([1e-5, 1e-3])),
                                       elementwise_affine=draw(st.booleans())))
        elif kind == "batch_norm" and not seq:
            layers.append(nn.BatchNorm1d(width, eps=draw(st.sampled_from([1e-5, 1e-2])),
                                         momentum=draw(st.sampled_from([0.1, 0.3])), affine=draw(st.booleans())))
        elif kind == "nested":
            out = draw(st.integers(1, 4))
            layers.append(nn.Sequential(nn.Linear(width, out), nn.Tanh()))
            width = out
    if seq and draw(st.booleans()) or all(isinstance(m, nn.Identity) for m in layers):  # never an empty model
        layers += [nn.Flatten(), nn.Linear(t * width if seq else width, 2)]
    seed = draw(st.integers(0, 2**16))
    torch.manual_seed(seed)
    module = _randomise(nn.Sequential(*layers).double(), seed)
    return module, rand(*shape, seed=seed + 1, scale=1.5)


@settings(max_examples=n_examples(40), deadline=None)
@given(mlp_cases())
def test_mlp_stacks_match_torch(case):
    """Sequential perceptron stacks: outputs and parameter gradients equal torch's, in both lowerings."""
    module, x = case
    assert_matches_torch(module, (x,))


def test_single_linear_on_sequence_keeps_length_symbolic():
    """nn.Linear on [B, T, F] is a head on every item; T stays symbolic, so other lengths run too."""
    lin = nn.Linear(3, 2).double()
    spec = assert_matches_torch(lin, (rand(2, 4, 3),))
    assert "sequence[B, T, 3]" in spec.text and "ψ identity = W [2, 3]" in spec.text
    model = spec.compile()
    x = rand(3, 7, 3, seed=5)
    torch.testing.assert_close(model(x), lin(x).detach())


def test_processing_folds_into_the_head_before_it():
    """Activations, dropout and norms after a Linear become that head's ``post`` list (output processing)."""
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Dropout(0.1), nn.LayerNorm(3), nn.Linear(3, 2))
    spec = assert_matches_torch(m, (rand(2, 4),))
    assert "post = [relu, dropout(p = 0.1), layer_norm(eps = 1e-05)]" in spec.text
    assert spec.text.count("= head(") == 2


def test_leading_processing_is_an_op_and_typed_by_rank():
    """A norm/activation before any head is a processing op on the input (vector for 2-D, sequence for 3-D)."""
    m = nn.Sequential(nn.BatchNorm1d(4), nn.Sigmoid(), nn.Linear(4, 2))
    _randomise(m, 3)
    spec = assert_matches_torch(m, (rand(5, 4),))
    assert "input x: vector[B, 4]" in spec.text and "batch_norm(x" in spec.text


def test_dropout_with_p_one_is_omitted_with_a_note():
    """nn.Dropout(p=1) is the identity in eval mode but dropout(p) needs p < 1: it is left out, and the header
    says so."""
    m = nn.Sequential(nn.Linear(3, 2), nn.Dropout(1.0), nn.Linear(2, 2))
    spec = assert_matches_torch(m, (rand(2, 3),))
    assert "# Note: [1] Dropout(p=1.0) is omitted" in spec.text
