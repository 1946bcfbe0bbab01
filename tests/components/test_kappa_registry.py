"""The κ catalog: one-line docs and default schemas for every entry, tinyBIG's 50 + 47 classes covered, and inner κ
of extended / nested given by name (a bad name is a schema error, never an import)."""

from __future__ import annotations

import json

import pytest
import torch

import rpn2c
from rpn2c.components.kappa import Part
from rpn2c.components.registry import REGISTRY, all_entries, lookup
from rpn2c.errors import SpecError
from rpn2c.runtime.report import components_json

KAPPA = ("expansion", "compression")

# Entries with a required hyper-parameter (documented in their schema): a value that makes them construct.
REQUIRED = {
    **{n: {"size": 2} for n in ("patch_pool", "patch_max", "patch_min", "patch_mean", "patch_expansion")},
    **{n: {"parts": ["identity"]} for n in ("extended", "nested", "extended_compression", "nested_compression")},
    **{n: {"k": 2} for n in ("variance_threshold", "feature_clustering", "feature_selection", "pca",
                             "random_projection", "dimension_reduction", "manifold", "isomap", "lle", "mds",
                             "spectral_embedding", "tsne", "naive_probabilistic_compression",
                             *(f"naive_{d}_probabilistic_compression" for d in ("uniform", "normal", "cauchy", "chi2",
                                                                                 "exponential", "gamma", "laplace")))},
}

# tinybig_notes §1.3.1: the 50 expansion classes -> the rpn2c entry each resolves to (its alias is the class name)
TINYBIG_EXPANSIONS = {
    "identity_expansion": "identity", "reciprocal_expansion": "reciprocal", "linear_expansion": "linear",
    "taylor_expansion": "taylor", "fourier_expansion": "fourier", "hyperbolic_expansion": "hyperbolic",
    "arc_hyperbolic_expansion": "arc_hyperbolic", "trigonometric_expansion": "trigonometric",
    "arc_trigonometric_expansion": "arc_trigonometric",
    **{f"naive_{d}_expansion": f"naive_{d}" for d in ("normal", "cauchy", "chi2", "gamma", "laplace", "exponential")},
    **{f"{d}_expansion": f"probabilistic_{d}" for d in ("normal", "cauchy", "gamma", "laplace", "exponential")},
    "chi2_expansion": "probabilistic_chi2", "hybrid_probabilistic_expansion": "hybrid_probabilistic",
    "gaussian_rbf_expansion": "gaussian_rbf", "inverse_quadratic_rbf_expansion": "inverse_quadratic_rbf",
    "bspline_expansion": "bspline", "chebyshev_expansion": "chebyshev", "jacobi_expansion": "jacobi",
    **{f"{p}_expansion": p for p in ("hermite", "legendre", "bessel", "reverse_bessel", "fibonacci", "lucas")},
    "laguerre_expansion": "laguerre", "gegenbauer_expansion": "gegenbauer",
    "discrete_wavelet_expansion": "wavelet", "harr_wavelet_expansion": "haar_wavelet",
    "shannon_wavelet_expansion": "shannon_wavelet", "meyer_wavelet_expansion": "meyer_wavelet",
    "beta_wavelet_expansion": "beta_wavelet", "ricker_wavelet_expansion": "ricker_wavelet",
    "dog_wavelet_expansion": "dog_wavelet", "combinatorial_expansion": "combinatorial",
    "combinatorial_normal_expansion": "combinatorial_normal", "extended_expansion": "extended",
    "nested_expansion": "nested", "geometric_expansion": "patch_expansion",
    "cuboid_patch_based_geometric_expansion": "cuboid_expansion",
    "cylinder_patch_based_geometric_expansion": "cylinder_expansion",
    "sphere_patch_based_geometric_expansion": "sphere_expansion",
}

# tinybig_notes §1.3.2: the 47 compression classes
TINYBIG_COMPRESSIONS = {
    "identity_compression": "identity", "reciprocal_compression": "reciprocal", "linear_compression": "linear",
    "metric_compression": "metric",
    **{f"{m}_compression": f"{m}_compression" for m in ("max", "min", "sum", "mean", "prod", "median")},
    "geometric_compression": "patch_pool",
    **{f"{s}_patch_based_geometric_compression": f"{s}_pool" for s in ("cuboid", "cylinder", "sphere")},
    **{f"{s}_{m}_based_geometric_compression": f"{s}_{m}" for s in ("cuboid", "cylinder", "sphere")
       for m in ("max", "min", "mean")},
    "dimension_reduction_compression": "dimension_reduction", "incremental_PCA_based_compression": "pca",
    "incremental_random_projection_based_compression": "random_projection",
    "feature_selection_compression": "feature_selection",
    "incremental_feature_clustering_based_compression": "feature_clustering",
    "incremental_variance_threshold_based_compression": "variance_threshold",
    "manifold_compression": "manifold",
    **{f"{m}_manifold_compression": m for m in ("isomap", "lle", "mds", "spectral_embedding", "tsne")},
    "combinatorial_compression": "combinatorial_compression",
    "combinatorial_probabilistic_compression": "combinatorial_probabilistic_compression",
    "naive_probabilistic_compression": "naive_probabilistic_compression",
    **{f"naive_{d}_probabilistic_compression": f"naive_{d}_probabilistic_compression"
       for d in ("uniform", "normal", "cauchy", "chi2", "exponential", "gamma", "laplace")},
    "extended_compression": "extended_compression", "nested_compression": "nested_compression",
}


def _entries():
    return [e for e in all_entries() if e.family in KAPPA]


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: f"{e.family}:{e.name}")
def test_entry_has_a_formula_doc_and_a_default_schema(entry):
    doc = entry.doc
    assert doc and "\n" not in doc and "κ" in doc and "=" in doc, doc
    assert len(doc) <= 116, doc  # `rpn2c components` prints it on one line
    required = {n for n, _, d in entry.hyperparameters() if d is ...}
    assert required == set(REQUIRED.get(entry.name, {})), (entry.name, required)
    hp = entry.schema(**REQUIRED.get(entry.name, {}))
    kappa = entry.cls(hp)
    assert kappa.name == entry.name and kappa.family == entry.family
    with pytest.raises(Exception):
        entry.schema(**REQUIRED.get(entry.name, {}), no_such_option=1)  # extra = forbid
    if kappa.elementwise:
        v = kappa.value_at_zero()
        assert v is not None and v.shape == (kappa.degree(),) and v.dtype == torch.float64


def test_catalog_sizes_and_json_listing():
    exp = [e for e in _entries() if e.family == "expansion"]
    comp = [e for e in _entries() if e.family == "compression"]
    assert len(exp) >= 53 and len(comp) >= 51
    data = json.loads(json.dumps(components_json()))
    names = {(c["family"], c["name"]) for c in data}
    assert ("expansion", "hermite") in names and ("compression", "cylinder_pool") in names


@pytest.mark.parametrize("family,table,count", [("expansion", TINYBIG_EXPANSIONS, 50),
                                                ("compression", TINYBIG_COMPRESSIONS, 47)])
def test_every_tinybig_class_resolves_to_an_entry(family, table, count):
    assert len(table) == count
    for cls_name, entry_name in table.items():
        entry = lookup(cls_name, (family,))
        assert entry is not None, cls_name
        assert entry.cls.name == entry_name and entry.family == family, (cls_name, entry.cls.name)


def test_paper_names_are_registered():
    exp = REGISTRY["expansion"]
    for n in ("identity", "reciprocal", "linear", "taylor", "fourier", "trigonometric", "rbf", "naive_probabilistic",
              "combinatorial", "combinatorial_normal", "bspline", "chebyshev", "jacobi", "hermite", "laguerre",
              "legendre", "gegenbauer", "bessel", "reverse_bessel", "fibonacci", "lucas", "meyer", "ricker", "shannon",
              "haar", "harr", "dog", "beta_wavelet", "extended", "nested"):
        assert n in exp, n
    comp = REGISTRY["compression"]
    for n in ("identity", "reciprocal", "linear", "metric", "patch_pool", "cuboid_pool", "cylinder_pool",
              "sphere_pool", "variance_threshold", "feature_selection", "feature_clustering", "pca", "incremental_pca",
              "random_projection", "isomap", "tsne", "naive_probabilistic_compression"):
        assert n in comp, n


# ------------------------------------------------------------------------------------------------ inner κ by name
def _spec(kappa: str) -> str:
    return f"model v {{ input x: vector[B, 3]  y = head(x) {{ kappa = {kappa}  out = 2 }}  return y }}"


def test_inner_kappa_parsed_and_validated():
    entry = REGISTRY["expansion"]["extended"]
    hp = entry.schema(parts=['chebyshev(d = 3, kind = 2)', "identity", ("bspline", {"grid": 2}),
                             "nested(parts = ['hermite'])"])
    # stored as canonical text, every option spelt out (plain data for the IR and its content hash)
    assert hp.parts[0] == "chebyshev(d = 3, kind = 2)" and hp.parts[1] == "identity"
    assert hp.parts[2] == "bspline(grid = 2, order = 3, low = -1.0, high = 1.0)"
    assert hp.parts[3] == "nested(parts = [\"hermite(d = 2, kind = 'probabilist')\"])"
    assert entry.schema(parts=list(hp.parts)) == hp  # the canonical text reads back to the same schema
    parts = entry.cls(hp).parts
    assert all(isinstance(p, Part) for p in parts) and [p.name for p in parts] == ["chebyshev", "identity", "bspline",
                                                                                    "nested"]
    assert parts[0].component.hp.d == 3 and parts[0].component.hp.kind == 2 and parts[2].component.hp.grid == 2
    g = rpn2c.check(_spec('extended(parts = ["taylor(d = 2, symmetric = true)", "legendre(d = 2)"])'))
    assert g.param_count == 2 * (3 + 6 + 6) + 2
    # equal programs have equal hashes, however the defaults are spelt
    assert rpn2c.check(_spec('nested(parts = ["chebyshev", "fourier"])')).content_hash() == \
        rpn2c.check(_spec('nested(parts = ["chebyshev(d = 2)", "fourier(N = 5, P = 10.0)"])')).content_hash()
    assert "object at 0x" not in g.to_json()


@pytest.mark.parametrize("parts,needle", [
    ('["chebyshev", "no_such_kappa"]', "unknown inner κ 'no_such_kappa'"),
    ('["chebyshv"]', "did you mean 'chebyshev'"),
    ('["chebyshev(d = 0)"]', "inner κ 'chebyshev'"),
    ('["chebyshev(q = 1)"]', "inner κ 'chebyshev'"),
    ('["__import__(\\"os\\").system(\\"true\\")"]', "cannot read inner κ"),
    ('["chebyshev(d = len(x))"]', "not a literal"),
    ('["patch_max(size = 2)"]', "needs grid features"),
    ("[]", "at least 1"),
    ("[3]", "is a string like"),
])
def test_bad_inner_kappa_is_a_schema_error(parts, needle):
    with pytest.raises(SpecError) as exc:
        rpn2c.check(_spec(f"extended(parts = {parts})"))
    assert exc.value.codes == ["E0303"], exc.value.render()
    assert needle in exc.value.render(), exc.value.render()


def test_inner_compression_names_resolve_in_compression_composites():
    entry = REGISTRY["compression"]["nested_compression"]
    parts = entry.cls(entry.schema(parts=["pca(n_feature = 2)", "identity"])).parts
    assert parts[0].component.family == "compression" and parts[1].component.family == "compression"
    with pytest.raises(Exception, match="inner κ 'pca'"):
        REGISTRY["compression"]["nested_compression"].schema(parts=["pca"])  # k is required


def test_schema_errors_are_located_diagnostics():
    for kappa, needle in [("hermite(kind = \"physics\")", "kind"), ("gegenbauer(alpha = 0.0)", "alpha = 0"),
                          ("wavelet(mother = \"haar\", sigma = 1.0)", "no hyper-parameter sigma"),
                          ("naive_probabilistic(dist = \"gamma\", params = [1.0])", "concentration, rate"),
                          ("naive_normal(params = [0.0, -1.0])", "scale must be > 0"),
                          ("linear(c = 2.0, C = [[1.0]])", "either c or C"),
                          ("rbf(sigma = 1.0, epsilon = 2.0)", "either sigma or epsilon"),
                          ("combinatorial_normal(d = 3, rho = -0.6)", "rho must exceed"),
                          ("trigonometric(functions = [\"sin\", \"sinh\"])", "functions must be"),
                          ("bspline(low = 1.0, high = 0.0)", "high > low")]:
        with pytest.raises(SpecError) as exc:
            rpn2c.check(_spec(kappa))
        assert "E0303" in exc.value.codes and needle in exc.value.render(), (kappa, exc.value.render())


def test_shape_errors_of_kappa():
    cases = [("combinatorial(d = 4)", "need at least 4 features"), ("linear(C = [[1.0], [2.0]])", "has 2 rows")]
    for kappa, needle in cases:
        with pytest.raises(SpecError) as exc:
            rpn2c.check(_spec(kappa))
        assert needle in exc.value.render(), exc.value.render()
    for kappa, needle in [("pca(k = 5)", "need k <= m"), ("combinatorial_compression(d = 2, k = 4)", "exceeds")]:
        with pytest.raises(SpecError) as exc:
            rpn2c.check(f"model v {{ input x: vector[B, 3]  y = compress(x) {{ kappa = {kappa} }}  return y }}")
        assert needle in exc.value.render(), exc.value.render()
    with pytest.raises(SpecError) as exc:
        rpn2c.check("model g { input x: grid[B, 1, 4, 4]  y = compress(x) { kappa = sphere_max(radius = 1) }"
                    "  return y }")
    assert "3-D grid" in exc.value.render()
    with pytest.raises(SpecError) as exc:
        rpn2c.check("model g { input x: grid[B, 1, 4, 4]  y = compress(x) { kappa = cuboid_max(half = 1, "
                    "packing = \"complete_square\", stride = 2) }  return y }")
    assert "either stride or packing" in exc.value.render()
