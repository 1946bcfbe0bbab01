"""specs/swin.rpn equals transformers' SwinForImageClassification in float64 (small random configurations, nothing
downloaded): the library's weights loaded into the compiled spec by the "swin" weight map give its logits and every
parameter's gradient, in both lowerings (plain and shifted windows, their masks and relative position biases, patch
merging), and the spec's weights loaded into the library model give the spec's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import rpn2c
from rpn2c.frontends import weights
from tests.models.peers import assert_grads_equal, outputs_and_grads, randomise

transformers = pytest.importorskip("transformers")

SPEC = Path(__file__).resolve().parents[2] / "specs" / "swin.rpn"


def _library(**over):
    cfg = dict(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
               window_size=2, num_labels=10)
    cfg.update(over)
    config = transformers.SwinConfig(**cfg, attn_implementation="sdpa")
    torch.manual_seed(0)
    return randomise(transformers.SwinForImageClassification(config), ("norm",)).double().eval(), config


def _spec(config, reference: bool = False, model: str = "swin"):
    params = {"size": config.image_size, "patch": config.patch_size, "channels": config.num_channels,
              "d": config.embed_dim, "window": config.window_size, "pairs": config.depths[0] // 2,
              "heads1": config.num_heads[0], "heads2": config.num_heads[1], "eps": config.layer_norm_eps}
    if model == "swin":
        params["classes"] = config.num_labels
    return rpn2c.compile(SPEC.read_text(encoding="utf-8"), str(SPEC), model=model, params=params,
                         reference=reference).double().eval()


@pytest.mark.parametrize("reference", [False, True])
def test_library_weights_into_the_spec_give_the_library_model(reference):
    library, config = _library()
    spec = _spec(config, reference)
    assert sum(p.numel() for p in spec.parameters()) == sum(p.numel() for p in library.parameters()) == 35462
    pairs = config.depths[0] // 2
    spec.load_state_dict(weights.to_spec("swin", library.state_dict(), pairs, spec.state_dict()))
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    (want,), library_grads = outputs_and_grads(library, lambda m: m(x).logits)
    (got,), spec_grads = outputs_and_grads(spec, lambda m: m(x))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert_grads_equal("swin", spec_grads, library_grads, pairs, library.state_dict())


def test_spec_weights_into_the_library_give_the_spec():
    """Windows of 4 (shift 2) on a 16 x 16 and an 8 x 8 grid, two pairs per stage, other widths."""
    library, config = _library(image_size=32, patch_size=2, num_channels=2, embed_dim=12, depths=[4, 4],
                               num_heads=[3, 2], window_size=4, num_labels=5)
    spec = _spec(config)
    randomise(spec, ("pre.0.weight", "n.weight", "e.weight"))
    library.load_state_dict(weights.to_library("swin", spec.state_dict(), 2, library.state_dict()))
    x = torch.randn(2, 2, 32, 32, dtype=torch.float64)
    torch.testing.assert_close(library(x).logits, spec(x), rtol=0, atol=1e-12)


def test_swin_model_gives_the_last_hidden_state_and_the_pooled_output_both_ways():
    library, config = _library()
    base = library.swin
    spec = _spec(config, model="swin_model")
    assert sum(p.numel() for p in spec.parameters()) == sum(p.numel() for p in base.parameters())
    spec.load_state_dict(weights.to_spec("swin_model", base.state_dict(), 1, spec.state_dict()))
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    out = base(x)
    want = (out.last_hidden_state, out.pooler_output)
    for got, expected in zip(spec(x), want):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    randomise(spec, ("pre.0.weight", "n.weight", "e.weight"))
    base.load_state_dict(weights.to_library("swin_model", spec.state_dict(), 1, base.state_dict()))
    torch.testing.assert_close(base(x).pooler_output, spec(x)[1], rtol=0, atol=1e-12)


def test_the_map_names_every_tensor_of_both_sides():
    library, config = _library()
    spec = _spec(config)
    state = dict(library.state_dict())
    state.pop("swin.encoder.layers.1.blocks.1.attention.relative_position_bias.relative_position_bias_table")
    with pytest.raises(weights.WeightMapError, match=r"layers\.1\.blocks\.1\.attention\.relative_position_bias"):
        weights.to_spec("swin", state, 1, spec.state_dict())
