"""Every registry entry's runnable example: it checks, runs, is what docs and ``rpn2c components NAME`` show, and
compiles with ``torch.compile(fullgraph=True)`` to the eager outputs and parameter gradients.

aot_eager in float64 covers the whole catalog (the CI suite runs a fixed stratified subset, ``-m slow`` the rest);
inductor in float32 runs a named subset covering each kernel family. Entries that cannot be compiled as one graph
for a reason outside the project declare ``compile_limitation``: the list is pinned here so it can only shrink.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.components.registry import all_entries
from rpn2c.runtime import docgen
from rpn2c.runtime.cli import main
from rpn2c.runtime.report import _uses, compile_limitations
from rpn2c.syntax.format import format_program
from rpn2c.syntax.parser import parse
from tests.test_torch_compile import _assert_matches_eager, random_inputs

pytestmark = pytest.mark.compile

ENTRIES = all_entries()
KEY = {f"{e.family}:{e.name}": e for e in ENTRIES}
# what torch.compile(fullgraph=True) cannot compile (declared on the entries, with the reason); may only shrink
LIMITED = {
    "compression:" + n for n in (
        "combinatorial_compression", "combinatorial_probabilistic_compression",  # a Generator per forward
        "naive_probabilistic_compression", "naive_uniform_probabilistic_compression",
        "naive_normal_probabilistic_compression", "naive_cauchy_probabilistic_compression",
        "naive_laplace_probabilistic_compression", "naive_chi2_probabilistic_compression",
        "naive_exponential_probabilistic_compression", "naive_gamma_probabilistic_compression",
        "isomap", "lle", "manifold", "mds", "spectral_embedding", "tsne")}  # scikit-learn on the host
COMPILABLE = [k for k in KEY if k not in LIMITED]
# The CI subset: every 4th entry of each family (by name) plus every cell; `-m slow` runs the rest.
_RANK = {k: i for fam in {e.family for e in ENTRIES}
         for i, k in enumerate(sorted(k for k in COMPILABLE if KEY[k].family == fam))}
IN_CI = {k for k in COMPILABLE if _RANK[k] % 4 == 0 or KEY[k].family == "cell"}
# inductor (float32): one entry per kernel family
INDUCTOR = {
    "interdependence:grid_patch": "conv (im2col / conv2d)",
    "compression:patch_max": "pooling",
    "compression:cuboid_mean": "pooling over centred patches",
    "interdependence:chain": "chain scan",
    "interdependence:exponential_chain": "chain scan (powers)",
    "interdependence:graph": "gather/scatter (index_add)",
    "expansion:patch_expansion": "gather (patches)",
    "interdependence:low_rank_bilinear": "attention",
    "interdependence:gaussian_rbf_kernel": "pairwise kernels",
    "cell:lstm": "recurrent cell", "cell:gru": "recurrent cell", "cell:rnn": "recurrent cell",
    "cell:diagonal": "parallel scan (linear recurrence)",
    "expansion:chebyshev": "elementwise expansion", "reconciliation:lorr": "reconciliation",
    "fusion:concat_linear": "fusion",
}


def _pair(entry, backend: str, dtype=torch.float64, fullgraph: bool = True):
    text = entry.example
    graph = rpn2c.check(text)
    torch.manual_seed(0)
    eager = rpn2c.compile(text).to(dtype).eval()
    compiled = rpn2c.compile(text, torch_compile={"fullgraph": fullgraph, "backend": backend}).to(dtype).eval()
    compiled._orig_mod.load_state_dict(eager.state_dict())
    inputs = [x.to(dtype) if x.is_floating_point() else x for x in random_inputs(graph)]
    return eager, compiled, inputs


# ------------------------------------------------------------------------------------------------ the examples
def test_every_entry_declares_an_example_that_checks_and_runs():
    assert len(ENTRIES) == 285
    for e in ENTRIES:
        text = e.example
        assert text and "{call}" not in text and "{name}" not in text, e.name
        assert format_program(parse(text, e.name)) == text, f"{e.name}: example not in canonical form"
        graph = rpn2c.check(text)
        used = {type(u.component) for n in graph.nodes() for u in _uses([n.layer, n.op])}
        folded = e.family == "interdependence" and e.name == "identity"  # identity ξ: the checker drops it
        assert e.cls in used or folded, f"{e.name}: the example does not use it"
        torch.manual_seed(0)
        ys = rpn2c.compile(text).double().eval()(*random_inputs(graph))
        for y in ys if isinstance(ys, tuple) else (ys,):
            assert torch.isfinite(y).all(), e.name


def test_docs_and_cli_show_the_example(capsys):
    text = docgen.render_components_markdown()
    for e in ENTRIES:
        assert f"```\n{e.example}```" in text, e.name
    assert main(["components", "patch_max"]) == 0
    out = capsys.readouterr().out
    assert KEY["compression:patch_max"].example in out and "max_pool" in out  # aliases listed
    assert main(["components", "max_pool"]) == 0  # an alias finds its entry
    assert KEY["compression:patch_max"].example in capsys.readouterr().out
    assert main(["components", "identity"]) == 0  # one name in several families: every one
    out = capsys.readouterr().out
    assert all(KEY[f"{f}:identity"].example in out for f in ("expansion", "reconciliation", "remainder"))
    assert main(["components", "identity", "--family", "remainder"]) == 0
    assert "pi = identity" in capsys.readouterr().out
    assert main(["components", "tsne"]) == 0
    assert "scikit-learn" in capsys.readouterr().out  # the declared limitation
    assert main(["components", "patch_mx"]) == 2
    assert "did you mean 'patch_max'" in capsys.readouterr().err


def test_check_compile_reports_the_declared_limitations(tmp_path, capsys):
    spec = tmp_path / "m.rpn"
    spec.write_text(KEY["compression:pca"].example.replace("pca(k = 2)", 'nested_compression(parts = ["tsne(k = 3)", '
                                                                         '"max_compression"])'), encoding="utf-8")
    assert main(["check", str(spec)]) == 0
    assert "torch.compile" not in capsys.readouterr().out
    assert main(["check", str(spec), "--compile"]) == 0
    out = capsys.readouterr().out
    assert "1 component use(s) cannot be compiled" in out and "y: tsne (compression): fits a scikit-learn" in out
    assert main(["check", str(spec), "--compile", "--format", "json"]) == 0
    import json

    limits = json.loads(capsys.readouterr().out)["compile_limitations"]
    assert [(x["node"], x["component"]) for x in limits] == [("y", "tsne")]
    assert compile_limitations(rpn2c.check(KEY["expansion:chebyshev"].example)) == []


# ------------------------------------------------------------------------------------------------ torch.compile
def test_declared_limitations_are_exactly_the_pinned_list():
    declared = {k for k, e in KEY.items() if e.compile_limitation}
    assert declared == LIMITED
    assert all(len(KEY[k].compile_limitation) > 40 for k in LIMITED)  # a reason, not a flag


@pytest.mark.parametrize("key", [pytest.param(k, marks=() if k in IN_CI else pytest.mark.slow) for k in COMPILABLE])
def test_example_fullgraph_aot_eager_matches_eager(key):
    """Forward and backward under fullgraph aot_eager equal eager in float64 (eval mode: dropout is the identity)."""
    torch._dynamo.reset()
    eager, compiled, inputs = _pair(KEY[key], "aot_eager")
    _assert_matches_eager(eager, compiled, inputs)


@pytest.mark.parametrize("key", [pytest.param(k, marks=() if k in ("compression:naive_probabilistic_compression",
                                                                   "compression:isomap") else pytest.mark.slow)
                                 for k in sorted(LIMITED)])
def test_declared_limitation_is_real_and_graph_breaks_still_match_eager(key):
    """Each declared limitation really stops fullgraph; with graph breaks allowed the entry still equals eager
    (the samplers under their fixed seed: call j of either module draws from the generator seeded by (seed, j))."""
    torch._dynamo.reset()
    eager, compiled, inputs = _pair(KEY[key], "aot_eager")
    with pytest.raises(torch._dynamo.exc.Unsupported):
        compiled(*inputs)
    torch._dynamo.reset()
    eager, compiled, inputs = _pair(KEY[key], "aot_eager", fullgraph=False)
    assert_close(compiled(*inputs), eager(*inputs), rtol=1e-9, atol=1e-10)


def test_dropout_trains_compiled_under_a_fixed_seed():
    """Training-mode dropout: the same seed gives the same mask, outputs and gradients eager and compiled."""
    torch._dynamo.reset()
    eager, compiled, inputs = _pair(KEY["processing:dropout"], "aot_eager")
    eager.train(), compiled.train()
    torch.manual_seed(7)
    want = eager(*inputs)
    torch.manual_seed(7)
    have = compiled(*inputs)
    assert (want == 0).any() and (want != 0).any()
    assert_close(have, want, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(INDUCTOR))
def test_example_fullgraph_inductor_float32_matches_eager(key):
    torch._dynamo.reset()
    eager, compiled, inputs = _pair(KEY[key], "inductor", torch.float32)
    _assert_matches_eager(eager, compiled, inputs, rtol=1e-4, atol=1e-5)


def test_inductor_subset_covers_every_kernel_family():
    kinds = " ".join(INDUCTOR.values())
    for family in ("conv", "pooling", "chain scan", "gather/scatter", "attention", "recurrent cell"):
        assert family in kinds
    assert {"cell:lstm", "cell:gru", "cell:rnn"} <= set(INDUCTOR) and set(INDUCTOR) <= set(COMPILABLE)
