"""What the long fuzz lanes found, each pinned: a model refuses inputs it cannot take with an ``InputError`` that names
the input, and the lane runner survives a hang, records it and minimises failures."""

from __future__ import annotations

import json

import pytest
import torch

import rpn2c
from rpn2c.errors import InputError

GRAPH = """model m {{
  input x: nodes[N, 4]
  input edges: edges[2, E]
  y = head(x) {{
    {settings}
    out = 2
  }}
  return y
}}
"""


def _model(settings: str):
    torch.manual_seed(0)
    return rpn2c.compile(GRAPH.format(settings=settings)).double()


@pytest.mark.parametrize("settings", [
    "xi_instance = graph(edges = edges)",
    "xi_instance = multihop_graph(edges = edges, hops = 2)",
    "xi_instance = pagerank(edges = edges)",
    "xi_instance = graph_attention(edges = edges)",
    'xi_instance = hybrid(parts = ["graph", "bilinear"], edges = edges, softmax = false, normalize = "softmax")',
])
@pytest.mark.parametrize("reference", [False, True])
def test_edge_ids_beyond_the_nodes_are_refused_by_name(settings, reference):
    """Found as a bare IndexError (or a RuntimeError from index_add) in the graph code."""
    torch.manual_seed(0)
    model = rpn2c.compile(GRAPH.format(settings=settings), reference=reference).double()
    x = torch.randn(4, 4, dtype=torch.float64)
    assert model(x, torch.tensor([[0, 1, 3], [1, 2, 0]])).shape == (4, 2)  # in range: runs
    with pytest.raises(InputError, match=r"edge list 'edges' holds id 7, .* 4 nodes .*\[0, 4\)"):
        model(x, torch.tensor([[0, 7, 3], [1, 2, 0]]))
    with pytest.raises(InputError, match="holds id -1"):
        model(x, torch.tensor([[0, -1], [1, 2]]))


def test_an_unchanged_edge_list_is_checked_once_and_a_changed_one_again():
    """The id check reads the edges' extremes (a host synchronisation on a GPU) once per edge list: a second step on
    the same tensor dispatches no aminmax; writing into it (its version counter moves) checks it again."""
    from tests.op_count import count_ops

    model = rpn2c.compile(GRAPH.format(settings="xi_instance = graph(edges = edges)"))
    x, edges = torch.randn(4, 4), torch.tensor([[0, 1, 3], [1, 2, 0]])
    first = count_ops(lambda: model(x, edges))
    again = count_ops(lambda: model(x, edges))
    assert first["aminmax"] >= 1 and again["aminmax"] == 0
    edges[0, 1] = 9  # in place: the same storage, a new version
    with pytest.raises(InputError, match="holds id 9"):
        model(x, edges)


def test_edge_ids_beyond_a_compressed_feature_axis_are_refused():
    """A graph ξ over the attribute axis after a compression to 1 feature: ids index features, and only 0 exists."""
    model = _model("kappa = pca(k = 1)\n    xi_attribute_post = graph(edges = edges)")
    x = torch.randn(4, 4, dtype=torch.float64)
    assert model(x, torch.zeros(2, 3, dtype=torch.int64)).shape == (4, 2)
    with pytest.raises(InputError) as info:
        model(x, torch.tensor([[0, 1], [1, 0]]))
    assert "'edges' holds id 1" in str(info.value) and "1 feature (the attribute axis" in str(info.value)
    assert isinstance(info.value, ValueError)  # what the checks it replaced raised


def test_token_ids_are_checked_in_one_pass():
    """The id check of an embedding reads the ids' extremes once (aminmax; on a GPU one host read per input tensor),
    no elementwise comparisons and reduction over every id, and still names an offender in a batch of many."""
    from tests.op_count import count_ops

    model = rpn2c.compile("model m {\n  input t: tokens[B, T]\n  y = embedding(t, vocab = 50, dim = 3)\n"
                          "  return y\n}\n")
    ids = torch.randint(0, 50, (4, 64))
    ops = count_ops(lambda: model(ids))
    assert ops["aminmax"] == 1 and not {"lt", "ge", "bitwise_or", "any"} & set(ops)
    ids[3, 17] = 50
    with pytest.raises(InputError, match=r"token id 50 at index \(3, 17\) is out of range \[0, 50\)"):
        model(ids)
    assert model(torch.zeros(2, 0, dtype=torch.int64)).shape == (2, 0, 3)


def test_token_ids_and_shapes_are_refused_as_input_errors():
    model = rpn2c.compile("model m {\n  input t: tokens[B, T]\n  y = embedding(t, vocab = 5, dim = 3)\n"
                          "  return y\n}\n")
    with pytest.raises(InputError, match=r"token id 5 .* out of range \[0, 5\)"):
        model(torch.tensor([[1, 5]]))
    with pytest.raises(InputError, match="integer token ids"):
        model(torch.rand(1, 2))
    with pytest.raises(InputError, match="input 't' must be tokens"):
        model(torch.zeros(2, dtype=torch.int64))


MASKED = """model m {{
  input x: {x}
  input mask: block_mask[{mask}]
  y = head(x) {{
    kappa = combinatorial_compression
    xi_instance = bilinear({key} = mask)
    out = 2
  }}
  return y
}}
"""


def test_a_symbol_takes_one_size_across_the_inputs():
    """Found as "size of tensor a (2) must match ... (3)" in SDPA: a [B, T] key padding given 3 rows for a batch of
    2 (a block_mask with a bilinear ξ after a compressing κ)."""
    model = rpn2c.compile(MASKED.format(x="sequence[B, T, 3]", mask="B, T", key="key_padding"))
    x = torch.randn(2, 4, 3)
    assert model(x, torch.zeros(2, 4, dtype=torch.bool)).shape == (2, 4, 2)
    with pytest.raises(InputError, match=r"input 'mask' must be block_mask\[B, T\]: dimension 0 \(B\) is 3, but "
                                         r"input 'x' has B = 2"):
        model(x, torch.zeros(3, 4, dtype=torch.bool))
    with pytest.raises(InputError, match=r"dimension 1 \(T\) is 5, but input 'x' has T = 4"):
        model(x, mask=torch.zeros(2, 5, dtype=torch.bool))


@pytest.mark.parametrize("reference", [False, True])
def test_a_mask_that_cannot_fit_the_scores_is_refused_by_name(reference):
    """Found as a broadcast RuntimeError in SDPA: a [T, T] key padding over an unbatched graph of 4 nodes."""
    model = rpn2c.compile(MASKED.format(x="nodes[N, 3]", mask="T, T", key="key_padding"), reference=reference)
    with pytest.raises(InputError, match=r"mask 'mask' \(key_padding\) has shape \[4, 4\], which does not fit the "
                                         r"attention scores \[1, 4\]"):
        model(torch.randn(4, 3), torch.zeros(4, 4, dtype=torch.bool))
    ok = rpn2c.compile(MASKED.format(x="nodes[N, 3]", mask="N", key="key_padding"), reference=reference)
    assert ok(torch.randn(4, 3), torch.tensor([False, True, False, False])).shape == (4, 2)


def test_pagerank_that_needs_millions_of_power_steps_is_a_located_error():
    """Found as a forward pass running for minutes (alpha = 1e-06: 27.6 million power steps)."""
    with pytest.raises(rpn2c.SpecTypeError) as info:
        rpn2c.check(GRAPH.format(settings="xi_instance = pagerank(edges = edges, alpha = 1e-06)"))
    assert info.value.codes == ["E0303"] and "27,631,007 power steps" in str(info.value)
    with pytest.raises(rpn2c.SpecTypeError):
        rpn2c.check(GRAPH.format(settings="xi_instance = pagerank(edges = edges, iters = 1000000000)"))
    # the dense solve has no steps, and alpha = 0.01 (2,749 steps) stays allowed
    rpn2c.check(GRAPH.format(settings='xi_instance = pagerank(edges = edges, alpha = 1e-06, method = "solve")'))
    rpn2c.check(GRAPH.format(settings="xi_instance = pagerank(edges = edges, alpha = 0.01)"))


def test_a_manifold_kappa_propagates_nan_as_torch_does():
    """Found by the held-out lanes: a recurrence with decay = 1e30 overflowed to NaN, and scikit-learn's Isomap
    refused the NaN rows with a ValueError; a κ passes non-finite input on as NaN, as any torch op does."""
    pytest.importorskip("sklearn")
    model = rpn2c.compile("model m {\n  input x: sequence[B, 6, 4]\n  y = head(x) {\n    kappa = isomap(k = 2)\n"
                          "    out = 3\n  }\n  return y\n}\n").double().eval()
    x = torch.randn(2, 6, 4, dtype=torch.float64)
    assert torch.isfinite(model(x)).all()
    x[0, 2, 1] = float("nan")
    with torch.no_grad():
        y = model(x)
    assert y.shape == (2, 6, 3) and torch.isnan(y).any()


def test_readout_of_one_unbatched_graph_pools_its_nodes():
    """Found by the held-out lanes: ``readout`` of ``nodes[N, F]`` made by ``batch_as_items`` indexed a batch axis
    the tensor did not have (an unbatched input is held with a sample axis of one inside the model; the op now
    makes one too); it pools the N nodes into vector[1, F]."""
    text = "model m {\n  input x: vector[B, 3]\n  n = batch_as_items(x)\n  y = readout(n, how = \"max\")\n  return y\n}\n"
    x = torch.randn(5, 3)
    for reference in (False, True):
        assert torch.equal(rpn2c.compile(text, reference=reference)(x), x.amax(0, keepdim=True))


def test_isomap_embeds_into_the_dims_its_kernel_allows():
    """Found by the held-out lanes: Isomap into k dims of barely more than k rows met negative eigenvalues of its
    geodesic kernel and scikit-learn refused (``ValueError``); it embeds into fewer dims, zeros after them."""
    pytest.importorskip("sklearn")
    model = rpn2c.compile("model m {\n  input x: sequence[B, 5, 8]\n  y = head(x) {\n    kappa = isomap(k = 8)\n"
                          "    out = 4\n  }\n  return y\n}\n").double().eval()
    kappa = next(m for m in model.modules() if type(m).__name__ == "ManifoldCompression")
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(610120670))
    with torch.no_grad():
        emb = kappa(x).reshape(10, 8)
        assert torch.isfinite(model(x)).all()
    used = int((emb.abs().amax(0) > 0).sum())
    assert 1 <= used < 8 and (emb[:, used:] == 0).all()


@pytest.mark.parametrize("method", ["tsne", "isomap", "mds"])
def test_a_manifold_kappa_embeds_one_repeated_point_at_the_origin(method):
    """Found by the confirmation lanes: t-SNE of identical rows (a zero ξ before it) divided its initial layout by
    a zero spread and crashed in C (a segmentation fault); one point, repeated, embeds at the origin."""
    pytest.importorskip("sklearn")
    from rpn2c.functional.compression_modules import ManifoldCompression

    with torch.no_grad():
        out = ManifoldCompression(2, method=method)(torch.full((2, 5, 3), 0.5))
    assert out.shape == (2, 5, 2) and (out == 0).all()


@pytest.mark.parametrize("mode, most", [("circular", 8), ("reflect", 7)])
def test_wrapping_pads_stop_where_torch_can_pad(mode, most):
    """Found by the final lanes: circular padding of 100000 cells on an axis of 8 raised torch's "wrapping around
    more than once" in the forward; the largest pad torch takes runs in both lowerings, one more is E0402."""
    spec = ("model m {{\n  input x: signal[B, 2, 8]\n  y = head(x) {{\n    xi_attribute = grid_patch(size = 3, "
            "pad = {}, padding_mode = \"{}\")\n    out = 3\n  }}\n  return y\n}}\n")
    torch.manual_seed(0)
    fast = rpn2c.compile(spec.format(most, mode)).double()
    ref = rpn2c.compile(spec.format(most, mode), reference=True).double()
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(2, 2, 8, dtype=torch.float64)
    torch.testing.assert_close(fast(x), ref(x))
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(spec.format(most + 1, mode))
    assert err.value.diagnostics[0].code == "E0402"


@pytest.mark.parametrize("fails", [(), (torch.float32,), (torch.float32, torch.float64)])
def test_pca_eigendecomposition_falls_back_where_lapack_does_not_converge(monkeypatch, fails):
    """Found by the final lanes: the incremental PCA κ's float32 ``eigh`` of a 392 × 392 Gram of 64 rows did not
    converge (``LinAlgError``); it retries in float64, then takes an SVD, with the same eigenpairs."""
    from rpn2c.functional import compression_modules as cm

    x = torch.randn(6, 9, generator=torch.Generator().manual_seed(0))
    S = x.T @ x / 6  # rank 6 of 9: repeated zero eigenvalues
    want_vals, want_vecs = torch.linalg.eigh(S.double())
    eigh = torch.linalg.eigh

    def flaky(a):
        if a.dtype in fails:
            raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")
        return eigh(a)

    monkeypatch.setattr(torch.linalg, "eigh", flaky)
    vals, vecs = cm._symmetric_eigh(S)
    assert vals.dtype == torch.float32
    torch.testing.assert_close(vals.double(), want_vals, atol=1e-5, rtol=1e-5)
    top = slice(-6, None)  # the non-zero eigenvalues' vectors are unique up to sign
    torch.testing.assert_close((vecs[:, top].double().T @ want_vecs[:, top]).abs(), torch.eye(6, dtype=torch.float64),
                               atol=1e-4, rtol=0)
    bad = S.clone()
    bad[0, 0] = float("inf")
    assert torch.isnan(cm._symmetric_eigh(bad)[1]).all()


def test_a_singular_pagerank_solve_takes_the_pseudo_inverse():
    """Found by a resource audit: ``pagerank(method = "solve", alpha = 1e-12)``: I − (1 − α)Â is singular in float32
    (``LinAlgError`` from torch.linalg.solve)."""
    model = _model('xi_instance = pagerank(edges = edges, self_loops = true, alpha = 1e-12, method = "solve")').float()
    edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    assert torch.isfinite(model(torch.randn(4, 4), edges)).all()


def _show(argv):
    import contextlib
    import io

    from rpn2c.runtime.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_show_draws_a_gated_linear_recurrence():
    """Found by the show lane: the matrix view of ``examples/specs/gla.rpn`` raised torch.kron's "view size is not
    compatible with input tensor's size and stride" (``layer_matrix._kron``)."""
    from pathlib import Path

    spec = Path(__file__).resolve().parents[2] / "examples" / "specs" / "gla.rpn"
    rc, out, err = _show(["show", str(spec), "--format", "json"])
    assert rc == 0, err
    assert json.loads(out)


def test_show_bounds_read_a_mask_by_its_hyper_parameter(tmp_path):
    """Found by the show lane: ``show --bounds`` of attention with ``key_padding = k`` (a computed token mask) gave
    ``KeyError: 'key_padding'``: the ξ read the layer's extra inputs by value id, not by its hyper-parameter's name."""
    spec = tmp_path / "m.rpn"
    spec.write_text("model m {\n  input x: tokens[B, 6]\n  e = embedding(x, vocab = 9, dim = 4)\n"
                    "  k = token_mask(x, pad = 0)\n  y = head(e) {\n    xi_instance = attention(rank = 2, key_padding = k)\n"
                    "    out = 8\n  }\n  return y\n}\n")
    rc, out, err = _show(["show", str(spec), "--bounds"])
    assert rc == 0 and "rank(A)" in out, err


@pytest.mark.parametrize("kappa", ["cylinder_expansion", "cuboid_expansion(half = 1, stride = 2)",
                                   "patch_expansion(size = 2)", "identity", "chebyshev(d = 2)"])
def test_show_views_a_patch_expansion_as_its_selection_matrix(kappa):
    """Found by the show lane: a patch expansion (patches gathered as channels) on an image reached the pooling
    view (``AttributeError: 'PatchGatherModule' object has no attribute 'metric'``), and so did an elementwise κ
    over the channels (``compress(x) {}`` of a volume: no attribute 'geo'). Their views are the 0/1 selection, and
    the identity on the lifted input, that reproduce the layer."""
    from rpn2c.runtime.layer_matrix import layer_matrix

    torch.manual_seed(0)
    model = rpn2c.compile(f"model m {{\n  input x: image[B, 2, 6, 5]\n  y = compress(x) {{ kappa = {kappa} }}\n"
                          "  return y\n}\n", reference=True)
    model.emit(inline=False)
    model = model.double().eval()
    x = torch.randn(2, 2, 6, 5, dtype=torch.float64)
    view = layer_matrix(model, "y", {"x": x}, sample=1)
    with torch.no_grad():
        want = model(x)[1]
    assert set(view.matrix.unique().tolist()) <= {0.0, 1.0} and view.out_shape == tuple(want.shape)
    torch.testing.assert_close(view.output().reshape(want.shape), want)


@pytest.mark.parametrize("k, s, length, pad", [(3, 2, 2, 0), (4, 3, 2, 0), (3, 3, 1, 0), (5, 2, 4, 2), (3, 2, 7, 1)])
@pytest.mark.parametrize("pool", ["MaxPool1d", "AvgPool1d"])
def test_ceil_mode_windows_longer_than_the_grid_convert_exactly(k, s, length, pad, pool):
    """Found by the from_torch lane: ``MaxPool2d(3, stride = 2, ceil_mode = True)`` on a width of 2 (torch: one
    window) gave a spec the checker refused ("a patch of extent 3 does not fit an axis of length 2")."""
    from torch import nn

    m = getattr(nn, pool)(k, s, pad, ceil_mode=True).double()
    x = torch.randn(2, 3, length, dtype=torch.float64)
    spec = rpn2c.from_torch(m, (x,))
    for reference in (False, True):
        torch.testing.assert_close(spec.compile(reference=reference)(x), m(x))


def test_show_refuses_a_view_too_large_before_allocating_it(tmp_path):
    """Found by the show lane under its memory cap: a layer fusing a head of 100,000 outputs asked for an 80 GB
    identity in ``_fusion_maps``. Every array of the matrix view is sized before it is made."""
    spec = tmp_path / "m.rpn"
    spec.write_text("model m {\n  input x: vector[B, 4]\n  y = layer(x) {\n    head a { out = 3 }\n"
                    "    head b { out = 100000 }\n    fusion = concat\n  }\n  return y\n}\n")
    rc, out, err = _show(["show", str(spec), "--format", "json"])
    assert rc == 0 and json.loads(out)["layers"] == []
    assert "y: no matrix view: its matrix view needs a 100,003 × 100,003 array" in err


def test_signature_help_inside_a_xi_given_to_an_operation():
    """Found by the editor lane: signature help inside ``relation(a, b, xi = attention(...))`` answered an internal
    error (``AttributeError: type object 'LowRankBilinear' has no attribute 'arity'``): the operation's input slots
    were asked of the ξ."""
    from rpn2c.runtime import symbols

    text = "model m {\n  input a: sequence[B, T, 4]\n  r = relation(a, a, xi = attention(rank = 2))\n  return r\n}\n"
    col = text.split("\n")[2].index("attention(") + len("attention(")
    sig = symbols.signature_help(text, 2, col)
    assert sig.label.startswith("attention(softmax: bool") and "x1" not in sig.label


def test_the_from_torch_lane_compares_infinities_as_values():
    """Found by the from_torch lane: ``MaxPool2d(2, 2, padding = 1, dilation = 2)`` on a grid of 2 x 1 gives -inf
    (a window of padding only) in torch and in the spec alike; the lane's comparison took -inf − (-inf) = NaN for a
    difference."""
    from torch import nn

    from rpn2c.runtime.fuzz_torch import _difference

    m = nn.MaxPool2d(2, 2, padding=1, dilation=2).double()
    x = torch.randn(1, 2, 2, 1, dtype=torch.float64)
    want = m(x)
    assert torch.isneginf(want).all()
    assert _difference(rpn2c.from_torch(m, (x,)).compile()(x), want) == 0.0
    assert _difference(torch.tensor([float("inf")]), torch.tensor([float("-inf")])) == float("inf")


def test_from_torch_fixes_the_items_joined_by_cat_before_a_flatten():
    """Found by the from_torch lane: a signal joined with its activation along the channels (taken as items), then
    flattened into a Linear, gave a spec whose feature count was '(T+T)*9' (E0402 at compile)."""
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(18, 3)

        def forward(self, x):
            return self.fc(torch.cat([torch.tanh(x), x], dim=1).flatten(1))

    torch.manual_seed(0)
    net, x = Net().double().eval(), torch.randn(2, 1, 9, dtype=torch.float64)
    spec = rpn2c.from_torch(net, (x,))
    torch.testing.assert_close(spec.compile()(x), net(x))


# ------------------------------------------------------------------------------------------------ the harness
def test_minimise_keeps_the_failure_and_drops_the_rest(monkeypatch):
    from rpn2c.runtime import fuzz_lanes
    from rpn2c.runtime.fuzz import Outcome

    def fake(text, *args, **kwargs):
        text = text.decode() if isinstance(text, bytes) else text
        return Outcome("failure", "boom") if "BOOM" in text and "keep" in text else Outcome("ok")

    monkeypatch.setattr(fuzz_lanes, "run_one", fake)
    source = "model m {\n  input x: vector[B, 4]\n  keep = head(x) { out = 2 }\n  y = BOOM(keep)\n  return y\n}\n"
    small = fuzz_lanes.minimise(source, "boom")
    assert "BOOM" in small and "keep" in small and len(small) < 20, small
    assert fuzz_lanes.minimise("model m {}", "boom") == "model m {}"  # not failing: left as it is


def test_a_lane_killed_by_timeout_records_the_input_in_flight(tmp_path, monkeypatch):
    """A hang in C code ignores the per-input alarm: the outer ``timeout`` kills the lane, and the runner records a
    failure and goes on (here the lane is killed while it starts, before its first input)."""
    from rpn2c.runtime import fuzz_lanes

    monkeypatch.setattr(fuzz_lanes, "GRACE", -1.5)
    report = fuzz_lanes.run_lanes(1, 2.6, 123, tmp_path)
    assert report["failures"] >= 1 and all("lane killed" in k for k in report["failure_kinds"])
    assert json.loads((tmp_path / "report.json").read_text())["failures"] == report["failures"]
    saved = (tmp_path / "failure_000.rpn").read_text()
    assert saved.startswith("# fuzz failure: lane killed") and "seed 123" in saved


def test_a_lane_streams_its_counts_and_failures(tmp_path):
    from rpn2c.runtime.fuzz_lanes import lane

    data = lane(500, 0.5, tmp_path, entries=("check",))
    assert data["inputs"] >= 1 and sum(data["counts"].values()) == data["inputs"]
    assert json.loads((tmp_path / "progress.json").read_text())["next"] == 500 + data["inputs"]
    assert (tmp_path / "failures.jsonl").read_text() == "" and not (tmp_path / "inflight").exists()


def test_show_of_data_longer_than_the_learned_positions_is_a_data_error(tmp_path, capsys):
    """Found by the fuzz lanes: a varied gpt2.rpn with fewer learned positions than the data's items made `show`
    call the input error a usage error (exit 2); it is the data not fitting the model: exit 1, named."""
    from rpn2c.runtime.cli import main

    spec = tmp_path / "lp.rpn"
    spec.write_text("model m {\n  input x: sequence[B, T, 1]\n  p = learned_position(x, max_len = 2)\n"
                    "  y = head(last(p)) {\n    out = 2\n  }\n  return y\n}\n", encoding="utf-8")
    assert main(["show", str(spec), "--data", "gunpoint"]) == 1
    err = capsys.readouterr().err
    assert "learned_position(max_len = 2) got a sequence of 150 items" in err and "Traceback" not in err


def test_the_outline_of_a_value_being_typed_as_a_number_answers():
    """Found by the editor lane: `y = 1.0` (an edit in progress, which the checker refuses) made the outline raise
    (`'Literal' object has no attribute 'func'`); it is outlined as a value."""
    from rpn2c.runtime.symbols import document_symbols

    syms = document_symbols("model m {\n  input x: vector[B, 4]\n  y = 1.0\n  z = 2 * 3\n  w = relu(x)\n  return w\n}\n")
    assert [(c.name, c.kind) for c in syms[0].children] == [("x", "input"), ("y", "value"), ("z", "value"),
                                                             ("w", "op")]
