"""specs/mamba_lm.rpn equals transformers' MambaForCausalLM in float64 (a small random MambaConfig, nothing
downloaded): the library's weights loaded into the compiled spec by the "mamba_lm" weight map give its logits and
every parameter's gradient, and the spec's weights loaded into the library model give the spec's, in both
lowerings (the reference lowering materialises the scan's lower-triangular matrix and each channel's Toeplitz
convolution matrix; the default one runs the parallel scan and one grouped conv1d).

The library runs its torch-only path here (no ``mamba_ssm`` or ``causal_conv1d`` installed: the sequential loop
over time steps and ``F.conv1d``), which casts to float32 in places (``.float()`` on A, B, D, Δ's bias and the
logits, RMSNorm's upcast, ``residual_in_fp32``); compared in float64 those casts keep the input's precision, the
library's formulas unchanged."""

from __future__ import annotations

import importlib.util
import pytest
import torch

import rpn2c
from rpn2c.frontends import weights
from tests.models.peers import SPECS, assert_library_into_spec, assert_spec_into_library, compiled, randomise

transformers = pytest.importorskip("transformers")

SPEC = SPECS / "mamba_lm.rpn"


@pytest.fixture(autouse=True)
def _torch_path_at_input_precision(monkeypatch):
    from transformers.models.mamba import modeling_mamba

    assert importlib.util.find_spec("mamba_ssm") is None and importlib.util.find_spec("causal_conv1d") is None
    to_float = torch.Tensor.float
    monkeypatch.setattr(torch.Tensor, "float",
                        lambda self, *a, **k: self if self.dtype == torch.float64 else to_float(self, *a, **k))

    def norm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    monkeypatch.setattr(modeling_mamba.MambaRMSNorm, "forward", norm)
    calls = []
    scan = modeling_mamba.mamba_selective_scan
    monkeypatch.setattr(modeling_mamba, "mamba_selective_scan", lambda *a, **k: calls.append(k) or scan(*a, **k))
    yield
    assert all(not k["use_mambapy"] for k in calls)  # the sequential loop, not mambapy's parallel scan


def _library(**over):
    cfg = dict(vocab_size=50, hidden_size=16, state_size=4, num_hidden_layers=2, conv_kernel=4, expand=2,
               residual_in_fp32=False)
    cfg.update(over)
    config = transformers.MambaConfig(**cfg)
    torch.manual_seed(1)
    return randomise(transformers.MambaForCausalLM(config).double().eval(), norms=("norm",)), config


def _spec(config, reference: bool = False):
    params = {"vocab": config.vocab_size, "d": config.hidden_size, "inner": config.intermediate_size,
              "state": config.state_size, "rank": config.time_step_rank, "kernel": config.conv_kernel,
              "layers": config.num_hidden_layers, "eps": config.layer_norm_epsilon}
    return compiled("mamba_lm", "mamba_lm", params, reference)


@pytest.mark.parametrize("reference", [False, True])
def test_library_weights_into_the_spec_give_the_library_model(reference):
    library, config = _library()
    spec = _spec(config, reference)
    ids = torch.randint(0, config.vocab_size, (3, 11))
    assert_library_into_spec("mamba_lm", library, spec, config.num_hidden_layers,
                             lambda m: m(ids, use_cache=False).logits, lambda m: m(ids), count=5264)


def test_spec_weights_into_the_library_give_the_spec():
    library, config = _library()
    spec = randomise(_spec(config), norms=("pre.", "n."))
    ids = torch.randint(0, config.vocab_size, (2, 9))
    assert_spec_into_library("mamba_lm", spec, library, config.num_hidden_layers, lambda m: m(ids),
                             lambda m: m(ids, use_cache=False).logits)
    assert library.lm_head.weight is library.backbone.embeddings.weight  # still one tensor


def test_another_rank_state_and_kernel_follow_the_configuration():
    """A Δ rank of 3, 2 states, a convolution of 2 taps and 3 blocks reach the spec by its parameters."""
    library, config = _library(hidden_size=24, time_step_rank=3, state_size=2, conv_kernel=2, num_hidden_layers=3)
    spec = _spec(config)
    spec.load_state_dict(weights.to_spec("mamba_lm", library.state_dict(), config.num_hidden_layers))
    ids = torch.randint(0, config.vocab_size, (2, 7))
    torch.testing.assert_close(spec(ids), library(ids, use_cache=False).logits, rtol=0, atol=1e-12)


def test_the_default_lowering_scans_and_never_builds_the_matrices(monkeypatch):
    """`rpn2c explain` records the parallel scan on each block's selective scan, and running the default lowering
    builds neither the scan's lower-triangular L[t, s] nor a convolution's Toeplitz matrix (each build is recorded
    here), which the reference lowering builds."""
    from rpn2c.lower import literal_forms
    from rpn2c.functional import causal_conv
    from rpn2c.passes import optimize
    from rpn2c.runtime.explain import explain_json

    nodes = {n["node"]: n for n in explain_json(optimize(rpn2c.check_file(SPEC)))["nodes"]}
    for i in range(2):
        assert nodes[f"h.{i}.s"]["rewritten"].startswith("parallel_scan[mamba(d_state=4, dt_rank=1)]")
    built = []

    def record(name, real):
        def call(*args, **kwargs):
            built.append(name)
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(literal_forms, "varying_matrix", record("L", literal_forms.varying_matrix))
    monkeypatch.setattr(causal_conv, "causal_conv_matrix", record("toeplitz", causal_conv.causal_conv_matrix))
    library, config = _library()
    ids = torch.randint(0, config.vocab_size, (2, 9))
    fast, ref = _spec(config), _spec(config, reference=True)
    ref.load_state_dict(fast.state_dict())
    want = ref(ids)
    assert sorted(set(built)) == ["L", "toeplitz"]
    built.clear()
    torch.testing.assert_close(fast(ids), want, rtol=0, atol=1e-12)
    assert built == [] and "lowering=parallel_scan" in repr(fast) and "CausalConvModule(" in repr(fast)
