"""Hybrid ξ fusions beyond the elementwise ones (paper eq 114, 119–120): weighted (fixed or learnable α), median,
concat + linear and concat + low-rank, each the fusion entry of the same name applied to the parts' matrices along
their output axis. Closed forms from the parts' literal matrices, parameter counts, both lowerings (values and
gradients, float64), located errors; and the bilinear part's scale without softmax (eq 86: none)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rpn2c
from rpn2c.components import REGISTRY
from rpn2c.components.base import XiContext
from rpn2c.components.registry import ValueRef
from rpn2c.errors import SpecError
from rpn2c.ir.kernels import offered
from tests.test_lowering_equivalence import _rand, assert_equivalent

EDGES = torch.tensor([[0, 1, 2, 3, 3, 4, 1, 1, 2], [1, 2, 3, 0, 4, 4, 0, 0, 2]])
PARTS = {"instance": '["chain", "gaussian_rbf_kernel", "low_rank_bilinear"], rank = 2',
         "attribute": '["chain", "pearson_correlation"]'}


def forms(comp, mod):
    """Every form the default lowering may run for the hybrid ξ: ``apply`` (the fused matrix) and each kernel its
    record offers for these hyper-parameters (``fused_parts``, ``edge_hadamard``)."""
    return [mod.apply] + [k.bind(mod) for k in type(comp).kernels if offered(comp, k)]


def _build(axis, n=5, m=4, **hp):
    entry = REGISTRY["interdependence"]["hybrid"]
    comp = entry.cls(entry.schema(**hp))
    ctx = XiContext(axis, n if axis == "instance" else m, m, m, n, {})
    mod = comp.build(ctx).double()
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return comp, ctx, mod


def _outputs_last(a, axis):
    return a.mT if axis == "instance" else a


@pytest.mark.parametrize("axis", ["instance", "attribute"])
@pytest.mark.parametrize("fusion, extra", [
    ("weighted", {"learnable": True}),
    ("weighted", {"learnable": False, "weights": [0.3, -1.5]}),
    ("median", {}),
    ("median", {"median_mode": "lower"}),
    ("concat_linear", {}),
    ("concat_linear", {"fusion_out": 3, "fusion_bias": True}),
    ("concat_lowrank", {"fusion_rank": 2, "fusion_bias": True}),
])
def test_fused_matrix_equals_the_formula_on_the_parts(axis, fusion, extra):
    """A from the parts' literal matrices A_i (paper orientation: rows = inputs, columns = outputs):
    Σ α_i A_i (114), the elementwise median, (⊔ A_i) W + 1 bᵀ (119), (⊔ A_i) P Qᵀ + 1 bᵀ (120); the default apply
    (the parts' outputs fused) equals A applied to z."""
    parts = ["chain", "gaussian_rbf_kernel"] if axis == "instance" else ["chain", "pearson_correlation"]
    if fusion == "median" and extra:  # an even count: the lower middle value
        parts = parts + ["one"]
    if fusion == "median" and not extra:
        parts = parts + ["one", "identity"]  # k = 4: the mean of the middle pair
    if "weights" in extra:
        extra = {**extra, "weights": extra["weights"] + [0.25] * (len(parts) - 2)}
    comp, ctx, mod = _build(axis, parts=parts, fusion=fusion, **extra)
    x = _rand(2, 5, 4)
    size = ctx.size
    mats = [_outputs_last(p.matrix(x, x, {}, size), axis) for p in mod.parts]
    mats = torch.broadcast_tensors(*mats)
    k = len(parts)
    if fusion == "weighted":
        alpha = mod.fusion.weights
        want = sum(a * m for a, m in zip(alpha, mats))
        assert alpha.requires_grad == extra["learnable"]
        if not extra["learnable"]:
            assert alpha.tolist() == pytest.approx(extra["weights"], rel=1e-7)
    elif fusion == "median":
        srt = torch.stack(mats).sort(0).values
        want = srt[(k - 1) // 2] if k % 2 or extra else (srt[k // 2 - 1] + srt[k // 2]) / 2
    else:
        cat = torch.cat(mats, -1)
        if fusion == "concat_linear":
            w, b = mod.fusion.linear.weight.mT, mod.fusion.linear.bias
        else:
            w, b = mod.fusion.P @ mod.fusion.Q.mT, mod.fusion.bias
        assert w.shape == (k * size, extra.get("fusion_out", size))
        want = cat @ w + (0 if b is None else b)
    got = mod.matrix(x, x, {}, size)
    torch.testing.assert_close(got, _outputs_last(want, axis))
    z = _rand(2, 5, 4, seed=5)
    runs = forms(comp, mod)
    assert len(runs) == (2 if fusion in ("sum", "mean", "weighted", "concat_linear", "concat_lowrank")
                         and extra.get("normalize", "none") == "none" else 1)
    for run in runs:
        torch.testing.assert_close(run(z, x, x, {}), z @ got if axis == "attribute" else got @ z)
    # parameter count: the parts' plus the fusion's
    parts_count = sum(p.count(ctx) for p, _ in comp.parts)
    n_out = extra.get("fusion_out", size)
    own = {"weighted": k if extra.get("learnable") else 0, "median": 0,
           "concat_linear": k * size * n_out + (n_out if extra.get("fusion_bias") else 0),
           "concat_lowrank": 2 * (k * size + n_out) + n_out}[fusion]
    assert comp.count(ctx) == parts_count + own == sum(p.numel() for p in mod.parameters())


@settings(max_examples=20, deadline=None)
@given(fusion=st.sampled_from(['fusion = "weighted"', 'fusion = "weighted", learnable = false, weights = [0.5, 2.0, '
                               '-1.0]', 'fusion = "median"', 'fusion = "concat_linear"',
                               'fusion = "concat_linear", fusion_out = 3, fusion_bias = true',
                               'fusion = "concat_lowrank", fusion_rank = 1, fusion_bias = true']),
       axis=st.sampled_from(["instance", "attribute"]),
       norm=st.sampled_from(["none", "none", "softmax", "row"]))
def test_new_fusions_default_equals_reference(fusion, axis, norm):
    parts = PARTS[axis]
    if axis == "attribute":
        fusion = fusion.replace("[0.5, 2.0, -1.0]", "[0.5, 2.0]")
    slot = "xi_instance" if axis == "instance" else "xi_attribute"
    text = (f"model h {{ input x: sequence[B, 5, 4] y = head(x) {{ {slot} = hybrid(parts = {parts}, "
            f'{fusion}, normalize = "{norm}")  out = 3 }} return y }}')
    assert_equivalent(text, {"x": _rand(2, 5, 4)})


def test_learnable_weights_are_trained():
    """α of fusion = "weighted" is a parameter with a gradient (eq 114, learnable); fixed weights are not."""
    text = ('model h { input x: sequence[B, 5, 4] y = head(x) { xi_instance = hybrid(parts = ["chain", '
            '"linear_kernel"], fusion = "weighted", weights = [0.5, 0.25])  out = 3 } return y }')
    model = rpn2c.compile(text).double()
    alpha = dict(model.named_parameters())["y.xi_instance.fusion.weights"]
    assert alpha.tolist() == [0.5, 0.25]  # exact in float32
    model(_rand(2, 5, 4)).sum().backward()
    assert alpha.grad is not None and alpha.grad.abs().sum() > 0
    fixed = rpn2c.compile(text.replace("weights = [", "learnable = false, weights = [")).double()
    assert "y.xi_instance.fusion.weights" not in dict(fixed.named_parameters())
    assert rpn2c.check(text).param_count == rpn2c.check(text.replace("weights = [", "learnable = false, "
                                                                                    "weights = [")).param_count + 2


@pytest.mark.parametrize("xi, needle", [
    ('fusion = "sum", learnable = true', 'learnable applies to fusion = "weighted"'),
    ('fusion = "weighted", fusion_out = 2', 'fusion_out applies to fusion = "concat_linear" or'),
    ('fusion = "concat_linear", fusion_rank = 2', 'fusion_rank applies to fusion = "concat_lowrank"'),
    ('fusion = "hadamard", median_mode = "lower"', 'median_mode applies to fusion = "median"'),
    ('fusion = "weighted", weights = [1.0]', "2 parts but 1 weights"),
    ('fusion = "concat_lowrank", fusion_rank = 0', "fusion_rank"),
    ('fusion = "mode"', "fusion"),
])
def test_bad_fusion_settings_are_located_errors(xi, needle):
    text = ('model h {\n  input x: sequence[B, 5, 4]\n  y = head(x) {\n    xi_instance = hybrid(parts = ["chain", '
            f'"linear_kernel"], {xi})\n    out = 3\n  }}\n  return y\n}}\n')
    with pytest.raises(SpecError) as err:
        rpn2c.check(text, "h.rpn")
    [d] = err.value.diagnostics
    assert d.code == "E0303" and d.span.line == 4, d
    assert needle in d.message
    assert "h.rpn:4:" in err.value.render()


def test_concat_fusion_needs_a_known_axis_length():
    text = ('model h {\n  input x: sequence[B, N, 4]\n  y = head(x) {\n    xi_instance = hybrid(parts = ["chain", '
            '"linear_kernel"], fusion = "concat_linear")\n    out = 3\n  }\n  return y\n}\n')
    with pytest.raises(SpecError) as err:
        rpn2c.check(text, "h.rpn")
    [d] = err.value.diagnostics
    assert d.span.line == 4 and "needs a known length" in d.message and "declare it as a number" in d.message
    rpn2c.check(text.replace("sequence[B, N, 4]", "sequence[B, 5, 4]"))  # a literal length: fine


# ------------------------------------------------------------------------------------------------ eq 86: no scale
@pytest.mark.parametrize("part, hp", [("bilinear", {}), ("low_rank_bilinear", {"rank": 3}),
                                      ("parameterized_bilinear", {})])
def test_graph_bilinear_without_softmax_has_no_scale(part, hp):
    """Eq 86: A = A_g ∘ A_b with A_b = X W Xᵀ (low rank: (X W_q)(X W_k)ᵀ) — no 1/√r unless the scaled softmax
    (eq 182) is used (docs/semantics.md, "Bilinear scale")."""
    n, m = 5, 4
    for softmax in (False, True):
        comp, _, mod = _build("instance", n=n, m=m, parts=["graph", part], edges=ValueRef("edges"),
                              softmax=softmax, **hp)
        bil = mod.parts[1]
        x = _rand(2, n, m)
        if part == "parameterized_bilinear":
            logits = bil.matrix(x, x, {}, n)  # its own form, checked for the scale below
            r = m
            assert bil.scale == (1 / math.sqrt(r) if softmax else 1.0)
            continue
        qq = x @ bil.w_q
        kk = x if bil.full else x @ bil.w_k
        r = qq.shape[-1]
        logits = qq @ kk.mT
        want_b = torch.softmax(logits / math.sqrt(r), -1) if softmax else logits
        torch.testing.assert_close(bil.matrix(x, x, {}, n), want_b)
        a_g = mod.parts[0].matrix(x, x, {"edges": EDGES}, n)
        torch.testing.assert_close(mod.matrix(x, x, {"edges": EDGES}, n), a_g * want_b)
        z = _rand(2, n, 3, seed=4)
        runs = forms(comp, mod)
        assert len(runs) == 2  # apply and edge_hadamard
        for run in runs:
            torch.testing.assert_close(run(z, x, x, {"edges": EDGES}), (a_g * want_b) @ z)


def test_explicit_scale_is_kept_without_softmax():
    _, _, mod = _build("instance", parts=["graph", "low_rank_bilinear"], edges=ValueRef("edges"), rank=4,
                       softmax=False, scale=0.5)
    assert mod.parts[1].scale == 0.5


def _hand_parts(x, axis, k):
    """The parts written from their definitions, per sample, in the paper's orientation (rows = inputs, columns =
    outputs): the chain (input j feeds output j + 1), the Gaussian RBF exp(−‖x_i − x_j‖²/2) over the items or the
    Pearson correlation of the features (numpy's corrcoef), and the all-ones matrix ``one``."""
    import numpy as np

    out = []
    for sample in x.numpy():
        if axis == "instance":
            d2 = ((sample[:, None] - sample[None]) ** 2).sum(-1)
            data = np.exp(-d2 / 2)
        else:
            data = np.corrcoef(sample.T)
        size = len(data)
        out.append([np.eye(size, k=1), data, np.ones((size, size))][:k])
    return [torch.tensor(np.stack([s[i] for s in out])) for i in range(k)]


@pytest.mark.parametrize("axis", ["instance", "attribute"])
@pytest.mark.parametrize("fusion, extra", [
    ("weighted", {"learnable": False, "weights": [0.3, -1.5, 0.25]}),
    ("median", {}),
    ("concat_linear", {"fusion_out": 3, "fusion_bias": True}),
    ("concat_lowrank", {"fusion_rank": 2, "fusion_bias": True}),
])
def test_fusions_of_hand_built_parts(axis, fusion, extra):
    """Eq 114, 119–120 and the median over parts built here, not read from the implementation: the chain, the RBF
    kernel (instances) or Pearson correlation (attributes), and ``one``; the fusion's own weights (W, P, Q, b) are
    the module's parameters, drawn at random."""
    second = "gaussian_rbf_kernel" if axis == "instance" else "pearson_correlation"
    _, ctx, mod = _build(axis, parts=["chain", second, "one"], fusion=fusion, **extra)
    x = _rand(2, 5, 4)
    chain, data, ones = _hand_parts(x, axis, 3)
    if fusion == "weighted":
        alpha = mod.fusion.weights.detach()  # the given weights, held in float32 until .double()
        assert alpha.tolist() == pytest.approx([0.3, -1.5, 0.25], rel=1e-7)
        want = alpha[0] * chain + alpha[1] * data + alpha[2] * ones
    elif fusion == "median":  # three parts: the middle value of each entry
        want = torch.stack([chain, data, ones]).median(0).values
    else:
        cat = torch.cat([chain, data, ones], -1)
        if fusion == "concat_linear":
            want = cat @ mod.fusion.linear.weight.mT + mod.fusion.linear.bias
        else:
            want = cat @ (mod.fusion.P @ mod.fusion.Q.mT) + mod.fusion.bias
    got = _outputs_last(mod.matrix(x, x, {}, ctx.size), axis)
    torch.testing.assert_close(got.expand_as(want), want, rtol=1e-12, atol=1e-12)
