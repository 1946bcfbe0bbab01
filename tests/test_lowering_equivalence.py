"""The default lowering (native kernels) equals the reference lowering (literal matrices) on random specs.

Each property draws hyper-parameters and shapes, writes spec text, compiles both lowerings with the same
(randomised) weights, and compares outputs and parameter gradients of a random linear functional in float64.
It also checks that the built module has exactly the parameter count the checker reports.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c


def _n(k: int) -> int:
    """Scale an example budget by the loaded hypothesis profile ("ci" = 25 examples by default)."""
    return max(1, k * settings.default.max_examples // 25)


ACTIVATIONS = ["relu", "tanh", "sigmoid", "gelu", "silu", "elu", "leaky_relu", "softplus", "softmax",
               "log_softmax", "layer_norm", "batch_norm", "dropout(p = 0.3)", "layer_norm(affine = false)"]


def _compile_pair(text):
    torch.manual_seed(0)
    fast = rpn2c.compile(text).double().eval()
    ref = rpn2c.compile(text, reference=True).double().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in fast.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
        for name, b in fast.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g, dtype=b.dtype) + 0.5)
            elif name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g, dtype=b.dtype))
    ref.load_state_dict(fast.state_dict())
    return fast, ref


def assert_equivalent(text: str, inputs: dict[str, torch.Tensor]) -> None:
    fast, ref = _compile_pair(text)
    n_params = sum(p.numel() for p in fast.parameters())
    assert n_params == rpn2c.check(text).param_count, text
    assert n_params == sum(p.numel() for p in ref.parameters())
    y_fast, y_ref = fast(**inputs), ref(**inputs)
    assert y_fast.shape == y_ref.shape, text
    assert not torch.isnan(y_ref).any(), text
    assert_close(y_fast, y_ref, rtol=1e-9, atol=1e-9, msg=lambda m: f"{m}\n{text}")
    w = torch.randn(y_ref.shape, generator=torch.Generator().manual_seed(2), dtype=y_ref.dtype)
    if not y_ref.requires_grad:  # parameter-free (pooling) or piecewise-constant (order-0 B-spline) programs
        assert not y_fast.requires_grad
        return
    (y_fast * w).sum().backward()
    (y_ref * w).sum().backward()
    grads_ref = dict(ref.named_parameters())
    for name, p in fast.named_parameters():
        q = grads_ref[name]
        gf = p.grad if p.grad is not None else torch.zeros_like(p)
        gr = q.grad if q.grad is not None else torch.zeros_like(q)
        assert_close(gf, gr, rtol=1e-8, atol=1e-8, msg=lambda m: f"grad of {name}: {m}\n{text}")


def _rand(*shape, seed=3):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


# ------------------------------------------------------------------------------------------------ shared draws
@st.composite
def kappas(draw, m, allow_taylor=True):
    """(setting text, output width D) for an expansion over m features."""
    options = ["identity", "chebyshev", "bspline"] + (["taylor"] if allow_taylor and m <= 6 else [])
    kind = draw(st.sampled_from(options))
    if kind == "identity":
        return "identity", m
    if kind == "chebyshev":
        d = draw(st.integers(1, 3))
        return f"chebyshev(d = {d})", m * d
    if kind == "bspline":
        g, o = draw(st.integers(1, 3)), draw(st.integers(0, 2))
        return f"bspline(grid = {g}, order = {o}, low = -2.0, high = 2.5)", m * (g + o)
    d = draw(st.integers(1, 2))
    return f"taylor(d = {d})", sum(m ** k for k in range(1, d + 1))


@st.composite
def psis(draw, n, D):
    kind = draw(st.sampled_from(["identity", "eye", "lorr", "duplicated_padding"]))
    if kind == "lorr":
        return f"lorr(r = {draw(st.integers(1, min(n, D)))})"
    if kind == "duplicated_padding":
        return f"duplicated_padding(p = {draw(st.sampled_from(_divisors(n)))}, q = {draw(st.sampled_from(_divisors(D)))})"
    return kind


@st.composite
def channel_block(draw, n):
    """(settings text, fused width) for channels > 1 with a channel fusion, or a single channel."""
    c = draw(st.integers(1, 3))
    if c == 1:
        return "", n
    fusion = draw(st.sampled_from(["sum", "mean", "concat", "concat_linear"]))
    if fusion == "concat":
        return f"channels = {c}  channel_fusion = concat", n * c
    if fusion == "concat_linear":
        out = draw(st.integers(1, 4))
        bias = draw(st.booleans())
        return (f"channels = {c}  channel_fusion = concat_linear(out = {out}, bias = {str(bias).lower()})", out)
    return f"channels = {c}  channel_fusion = {fusion}", n


def _post(draw, allow=True):
    if not allow or not draw(st.booleans()):
        return ""
    acts = draw(st.lists(st.sampled_from(ACTIVATIONS), min_size=1, max_size=2))
    return f"post = [{', '.join(acts)}]"


# ------------------------------------------------------------------------------------------------ grid heads
def _extent(L, k, s, d, pb, pa):
    return (L + pb + pa - d * (k - 1) - 1) // s + 1


@st.composite
def grid_specs(draw):
    rank = draw(st.integers(1, 3))
    cin = draw(st.integers(1, 2))
    spatial = [draw(st.integers(2, 5 if rank < 3 else 3)) for _ in range(rank)]
    xi_kind = draw(st.sampled_from(["grid_patch", "cuboid_patch"]))
    mode = draw(st.sampled_from(["padding", "aggregation"]))
    args = []
    if xi_kind == "grid_patch":
        pmode = draw(st.sampled_from(["zeros", "circular", "reflect", "replicate"]))
        k = [draw(st.integers(1, 3)) for _ in range(rank)]
        s = [draw(st.integers(1, 2)) for _ in range(rank)]
        d = [draw(st.integers(1, 2)) for _ in range(rank)]
        cap = [L - 1 if pmode != "zeros" else 2 for L in spatial]
        pb = [draw(st.integers(0, c)) for c in cap]
        asym = draw(st.booleans())
        pa = [draw(st.integers(0, c)) for c in cap] if asym else list(pb)
        out_sp = [_extent(L, *a) for L, a in zip(spatial, zip(k, s, d, pb, pa))]
        if any(o < 1 for o in out_sp):
            k, d, out_sp = [1] * rank, [1] * rank, [_extent(L, 1, si, 1, b, a) for L, si, b, a in
                                                   zip(spatial, s, pb, pa)]
        fmt = (lambda v: str(v[0]) if len(set(v)) == 1 and draw(st.booleans()) else
               "[" + ", ".join(map(str, v)) + "]")
        args += [f"size = {fmt(k)}", f"stride = {fmt(s)}", f"dilation = {fmt(d)}", f"pad = {fmt(pb)}"]
        if asym:
            args.append(f"pad_after = {fmt(pa)}")
        args.append(f'padding_mode = "{pmode}"')
        patch = 1
        for ki in k:
            patch *= ki
    else:
        h = [draw(st.integers(0, 1)) for _ in range(rank)]
        ha = [draw(st.integers(0, 1)) for _ in range(rank)]
        s = [draw(st.integers(1, 2)) for _ in range(rank)]
        args += [f"half = [{', '.join(map(str, h))}]", f"half_after = [{', '.join(map(str, ha))}]",
                 f"stride = [{', '.join(map(str, s))}]"]
        out_sp = [_extent(L, a + b + 1, si, 1, a, b) for L, a, b, si in zip(spatial, h, ha, s)]
        patch = 1
        for a, b in zip(h, ha):
            patch *= a + b + 1
    args.append(f'mode = "{mode}"')
    mz = cin * patch if mode == "padding" else cin
    kappa, D = draw(kappas(mz, allow_taylor=mz <= 4))
    out = draw(st.integers(1, 4))
    psi = draw(psis(out, D))
    chan, width = draw(channel_block(out))
    bias = draw(st.sampled_from(["true", "false", '"untied"', '"tied"']))
    settings_ = [f"xi_attribute = {xi_kind}({', '.join(args)})", f"kappa = {kappa}", f"psi = {psi}",
                 f"out = {out}", chan, f"bias = {bias}"]
    if out_sp == spatial:
        pi = draw(st.sampled_from(["zero", "linear", "linear(bias = false)"] + (["identity"] if width == cin else [])))
        settings_.append(f"pi = {pi}")
    settings_.append(_post(draw))
    dims = ", ".join(map(str, spatial))
    text = (f"model g {{\n  input x: grid[B, {cin}, {dims}]\n  y = head(x) {{\n    "
            + "\n    ".join(s for s in settings_ if s) + "\n  }\n  return y\n}\n")
    return text, {"x": _rand(2, cin, *spatial) * 1.5}


@settings(max_examples=_n(60), deadline=None)
@given(grid_specs())
def test_grid_heads(case):
    assert_equivalent(*case)


@st.composite
def pool_specs(draw):
    rank = draw(st.integers(1, 3))
    cin = draw(st.integers(1, 2))
    spatial = [draw(st.integers(2, 5 if rank < 3 else 3)) for _ in range(rank)]
    how = draw(st.sampled_from(["patch_max", "patch_mean", "max_pool", "avg_pool"]))
    pmode = draw(st.sampled_from(["zeros", "zeros", "circular", "reflect", "replicate"]))
    k = draw(st.integers(1, 3))
    s = draw(st.none() | st.integers(1, 2))
    d = draw(st.integers(1, 2))
    cap = min(spatial) - 1 if pmode != "zeros" else 2
    pb = draw(st.integers(0, min(cap, k)))
    pa = draw(st.none() | st.integers(0, min(cap, k)))
    stride = k if s is None else s
    for L in spatial:
        if _extent(L, k, stride, d, pb, pb if pa is None else pa) < 1:
            k, d = 1, 1
    args = [f"size = {k}", f"pad = {pb}", f"dilation = {d}", f'padding_mode = "{pmode}"']
    if s is not None:
        args.append(f"stride = {s}")
    if pa is not None:
        args.append(f"pad_after = {pa}")
    dims = ", ".join(map(str, spatial))
    text = (f"model p {{\n  input x: grid[B, {cin}, {dims}]\n  y = compress(x) {{\n    kappa = {how}({', '.join(args)})\n"
            f"  }}\n  return y\n}}\n")
    return text, {"x": _rand(2, cin, *spatial)}


@settings(max_examples=_n(40), deadline=None)
@given(pool_specs())
def test_pooling(case):
    assert_equivalent(*case)


# ------------------------------------------------------------------------------------------------ item heads
def _bool_mask(shape, seed, keep_first=True, keep=True):
    """A random mask that never blocks key 0 (no fully blocked row); ``keep`` gives its polarity."""
    attend = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) < 0.6
    if keep_first:
        attend[..., 0] = True
    return attend if keep else ~attend


@st.composite
def chain_xi(draw):
    args = []
    if draw(st.booleans()):
        args.append(f'direction = "{draw(st.sampled_from(["forward", "backward", "bidirectional"]))}"')
    if draw(st.booleans()):
        args.append(f"self_loop = {str(draw(st.booleans())).lower()}")
    if draw(st.booleans()):
        args.append(f"hops = {draw(st.integers(1, 3))}")
    if draw(st.booleans()):
        args.append(f"accumulate = {str(draw(st.booleans())).lower()}")
    if draw(st.booleans()):
        args.append(f'norm = "{draw(st.sampled_from(["none", "row", "column"]))}"')
    return f"chain({', '.join(args)})"


@st.composite
def graph_xi(draw, inputs, n_items):
    e = draw(st.integers(0, 8))
    ei = torch.tensor(draw(st.lists(st.tuples(st.integers(0, n_items - 1), st.integers(0, n_items - 1)),
                                    min_size=e, max_size=e)), dtype=torch.long).reshape(-1, 2).T.contiguous()
    inputs["edges"] = ei
    args = ["edges = edges", f'norm = "{draw(st.sampled_from(["none", "row", "column", "symmetric"]))}"',
            f"self_loops = {str(draw(st.booleans())).lower()}", f"directed = {str(draw(st.booleans())).lower()}",
            f"hops = {draw(st.integers(1, 2))}"]
    decl = ["input edges: edges[2, E]"]
    if draw(st.booleans()):
        inputs["ew"] = torch.rand(ei.shape[1], generator=torch.Generator().manual_seed(5), dtype=torch.float64) + 0.1
        args.append("weight = ew")
        decl.append("input ew: edge_weight[E]")
    return f"graph({', '.join(args)})", decl


@st.composite
def bilinear_xi(draw, inputs, nq, nc, batch):
    kind = draw(st.sampled_from(["bilinear", "low_rank_bilinear", "attention"]))
    args = [] if kind == "bilinear" else [f"rank = {draw(st.integers(1, 3))}"]
    decl = []
    softmax = draw(st.booleans())
    if not softmax:
        args.append("softmax = false")
    if draw(st.booleans()):
        args.append("bias = true")
    if draw(st.booleans()):
        args.append(f"scale = {draw(st.sampled_from(['0.5', '1.0', '0.25']))}")
    if draw(st.booleans()):
        args.append("causal = true")
    if draw(st.booleans()):
        pol = draw(st.sampled_from(["block_mask", "keep_mask"]))
        inputs["kp"] = _bool_mask((batch, nc), 7, keep=pol == "keep_mask")
        decl.append(f"input kp: {pol}[B, S]")
        args.append("key_padding = kp")
    if draw(st.booleans()):
        pol = draw(st.sampled_from(["block_mask", "keep_mask", "additive_mask"]))
        per_sample = draw(st.booleans())
        shape = (batch, nq, nc) if per_sample else (nq, nc)
        if pol == "additive_mask":
            inputs["am"] = _rand(*shape, seed=8)
        else:
            inputs["am"] = _bool_mask(shape, 9, keep=pol == "keep_mask")
        decl.append(f"input am: {pol}[{'B, ' if per_sample else ''}T, S]")
        args.append("attn_mask = am")
    return f"{kind}({', '.join(args)})", decl


@st.composite
def item_specs(draw):
    batch, n, m = 2, draw(st.integers(2, 5)), draw(st.integers(1, 4))
    inputs = {"x": _rand(batch, n, m)}
    known_n = draw(st.booleans())
    decls = [f"input x: sequence[B, {n if known_n else 'T'}, {m}]"]
    cross = draw(st.booleans())
    head_args = "x"
    nc, mc = n, m
    if cross:
        nc, mc = draw(st.integers(1, 5)), draw(st.integers(1, 3))
        inputs["mem"] = _rand(batch, nc, mc, seed=4)
        decls.append(f"input mem: sequence[B, S, {mc}]")
        head_args = "x, context = mem"
    settings_ = []
    mz = mc
    if cross:
        # a context head must map back to the query items: attention as xi_instance
        xi, decl = draw(bilinear_xi(inputs, n, nc, batch))
        decls += decl
        settings_.append(f"xi_instance = {xi}")
        if draw(st.booleans()):
            settings_.append(f"xi_attribute = {draw(chain_xi())}")
    else:
        for slot in ("xi_attribute", "xi_instance_prior", "xi_instance", "xi_attribute_post"):
            choice = draw(st.sampled_from(["none", "chain", "graph", "bilinear"] if slot.startswith("xi_instance")
                                          else ["none", "chain"]))
            if choice == "chain":
                settings_.append(f"{slot} = {draw(chain_xi())}")
            elif choice == "graph":
                if "edges" in inputs:
                    continue
                xi, decl = draw(graph_xi(inputs, n))
                decls += decl
                settings_.append(f"{slot} = {xi}")
            elif choice == "bilinear":
                if "kp" in inputs or "am" in inputs:
                    continue
                xi, decl = draw(bilinear_xi(inputs, n, n, batch))
                decls += decl
                settings_.append(f"{slot} = {xi}")
    kappa, D = draw(kappas(mz))
    out = draw(st.integers(1, 4))
    chan, width = draw(channel_block(out))
    settings_ += [f"kappa = {kappa}", f"psi = {draw(psis(out, D))}", f"out = {out}", chan,
                  "bias = " + draw(st.sampled_from(["true", "false"] + (['"untied"'] if known_n else [])))]
    pis = ["zero", "linear", "linear(bias = false)"] + (["identity"] if width == m else [])
    settings_.append(f"pi = {draw(st.sampled_from(pis))}")
    if draw(st.booleans()):
        settings_.append(f"pre = [{draw(st.sampled_from(['tanh', 'layer_norm', 'relu']))}]")
    settings_.append(_post(draw))
    text = ("model s {\n  " + "\n  ".join(decls) + f"\n  y = head({head_args}) {{\n    "
            + "\n    ".join(s for s in settings_ if s) + "\n  }\n  return y\n}\n")
    return text, inputs


@settings(max_examples=_n(80), deadline=None)
@given(item_specs())
def test_item_heads(case):
    assert_equivalent(*case)


# ------------------------------------------------------------------------------------------------ vector heads
@st.composite
def vector_specs(draw):
    m = draw(st.integers(1, 5))
    kappa, D = draw(kappas(m))
    out = draw(st.integers(1, 4))
    chan, width = draw(channel_block(out))
    pis = ["zero", "linear"] + (["identity"] if width == m else [])
    settings_ = [f"kappa = {kappa}", f"psi = {draw(psis(out, D))}", f"out = {out}", chan,
                 f"pi = {draw(st.sampled_from(pis))}", _post(draw)]
    if draw(st.booleans()):
        settings_.append(f"xi_attribute = {draw(chain_xi())}")
    text = (f"model v {{\n  input x: vector[B, {m}]\n  y = head(x) {{\n    " + "\n    ".join(s for s in settings_ if s)
            + "\n  }\n  return y\n}\n")
    return text, {"x": _rand(3, m) * 1.5}


@settings(max_examples=_n(40), deadline=None)
@given(vector_specs())
def test_vector_heads(case):
    assert_equivalent(*case)


# ------------------------------------------------------------------------------------------------ multi-head layers
@st.composite
def layer_specs(draw):
    n, m = draw(st.integers(2, 4)), draw(st.integers(1, 4))
    k = draw(st.integers(2, 3))
    fusion = draw(st.sampled_from(["sum", "mean", "concat", "concat_linear", "average"]))
    same = fusion in ("sum", "mean", "average")
    width = draw(st.integers(1, 3))
    heads, widths = [], []
    for i in range(k):
        out = width if same else draw(st.integers(1, 3))
        kappa, D = draw(kappas(m))
        xi = draw(st.sampled_from(["", "xi_instance = chain()", "xi_instance = low_rank_bilinear(rank = 2)",
                                   'xi_attribute = chain(direction = "bidirectional")',
                                   "xi_instance = attention(rank = 1, causal = true, bias = true)"]))
        chan, w = ("", out) if same else draw(channel_block(out))
        widths.append(w)
        heads.append(f"head h{i} {{ kappa = {kappa}  psi = {draw(psis(out, D))}  out = {out}  {chan}  {xi} }}")
    if fusion == "concat_linear":
        fo = draw(st.integers(1, 4))
        fusion_text, total = f"concat_linear(out = {fo})", fo
    else:
        fusion_text, total = fusion, (sum(widths) if fusion == "concat" else width)
    pis = ["zero", "linear"] + (["identity"] if total == m else [])
    body = "\n    ".join(heads) + f"\n    fusion = {fusion_text}\n    pi = {draw(st.sampled_from(pis))}\n    " + _post(draw)
    text = (f"model l {{\n  input x: sequence[B, T, {m}]\n  y = layer(x) {{\n    {body}\n  }}\n  return y\n}}\n")
    return text, {"x": _rand(2, n, m)}


@settings(max_examples=_n(30), deadline=None)
@given(layer_specs())
def test_multi_head_layers(case):
    assert_equivalent(*case)


@st.composite
def replicated_head_specs(draw):
    """``heads = k`` copies of an attention head fused by concat_linear (the transformer recipe)."""
    n, d, h = draw(st.integers(1, 5)), draw(st.sampled_from([2, 4, 6])), draw(st.sampled_from([1, 2]))
    causal = str(draw(st.booleans())).lower()
    text = f"""model t {{
  input x: sequence[B, T, {d}]
  input kp: block_mask[B, T]
  y = head(x) {{
    heads = {h}
    xi_instance = low_rank_bilinear(rank = {d // h}, bias = true, causal = {causal}, key_padding = kp)
    out = {d // h}
    fusion = concat_linear(out = {d})
    pi = identity
    post = [layer_norm]
  }}
  return y
}}
"""
    return text, {"x": _rand(2, n, d), "kp": _bool_mask((2, n), 11, keep=False)}


@settings(max_examples=_n(15), deadline=None)
@given(replicated_head_specs())
def test_replicated_attention_heads(case):
    assert_equivalent(*case)


# ------------------------------------------------------------------------------------------------ shipped specs
SHIPPED = {
    "cnn": {"x": (4, 1, 8, 8)},
    "mlp": {"x": (4, 30)},
    "rnn": {"x": (3, 6, 8)},
    "transformer": {"x": (3, 5, 32)},
}


def test_shipped_specs_equivalent():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "specs"
    for name, shapes in SHIPPED.items():
        text = (root / f"{name}.rpn").read_text()
        assert_equivalent(text, {k: _rand(*s) for k, s in shapes.items()})
    gcn = (root / "gcn.rpn").read_text()
    edges = torch.randint(0, 10, (2, 30), generator=torch.Generator().manual_seed(3))
    assert_equivalent(gcn, {"x": _rand(10, 34), "edges": edges})


_SHIPPED = sorted(Path(__file__).resolve().parents[1].glob("specs/*.rpn")) + \
    sorted(Path(__file__).resolve().parents[1].glob("examples/specs/*.rpn"))


@pytest.mark.parametrize("path", _SHIPPED, ids=lambda p: p.stem)
def test_the_oracle_builds_its_layers_on_its_own_to_the_same_tensors(path):
    """Two independent constructions (lower/heads.py, lower/oracle.py) agree on every tensor's name and shape:
    the reference's layers are ReferenceLayers, never the default's LayerModule."""
    from rpn2c.lower.heads import LayerModule
    from rpn2c.lower.oracle import ReferenceLayer

    fast, ref = rpn2c.compile_file(path), rpn2c.compile_file(path, reference=True)
    assert not any(isinstance(m, LayerModule) for m in ref.modules())
    assert all(isinstance(ref.get_submodule(n.id), ReferenceLayer) for n in ref.graph.nodes() if n.kind == "layer")
    a, b = fast.state_dict(), ref.state_dict()
    assert {k: tuple(v.shape) for k, v in a.items()} == {k: tuple(v.shape) for k, v in b.items()}
    assert [k for k, _ in fast.named_parameters()] and \
        {k: tuple(p.shape) for k, p in fast.named_parameters()} == {k: tuple(p.shape) for k, p in ref.named_parameters()}
