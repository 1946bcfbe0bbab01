"""specs/vit.rpn equals transformers' ViTForImageClassification in float64 (small random configurations, nothing
downloaded): the library's weights loaded into the compiled spec by the "vit" weight map give its logits and every
parameter's gradient, in both lowerings, and the spec's weights loaded into the library model give the spec's."""

from __future__ import annotations

import pytest
import torch

from rpn2c.frontends import weights
from tests.models.peers import assert_library_into_spec, assert_spec_into_library, compiled

transformers = pytest.importorskip("transformers")


def _library(**over):
    cfg = dict(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
               num_attention_heads=4, intermediate_size=64, num_labels=10)
    cfg.update(over)
    config = transformers.ViTConfig(**cfg, attn_implementation="sdpa")
    torch.manual_seed(1)
    model = transformers.ViTForImageClassification(config).double().eval()
    for name, p in model.named_parameters():  # away from the initial 0/1, so a swapped or lost tensor shows
        if "norm" in name and name.endswith("weight"):
            torch.nn.init.uniform_(p, 0.5, 1.5)
        else:
            torch.nn.init.normal_(p, std=0.2)
    return model, config


def _spec(config, reference: bool = False):
    params = {"size": config.image_size, "patch": config.patch_size, "channels": config.num_channels,
              "d": config.hidden_size, "heads": config.num_attention_heads, "ffn": config.intermediate_size,
              "layers": config.num_hidden_layers, "classes": config.num_labels, "eps": config.layer_norm_eps}
    return compiled("vit", "vit", params, reference)


@pytest.mark.parametrize("reference", [False, True])
def test_library_weights_into_the_spec_give_the_library_model(reference):
    library, config = _library()
    spec = _spec(config, reference)
    x = torch.randn(3, config.num_channels, config.image_size, config.image_size, dtype=torch.float64)
    assert_library_into_spec("vit", library, spec, config.num_hidden_layers, lambda m: m(x).logits, lambda m: m(x),
                             grad_atol=1e-12)


def test_spec_weights_into_the_library_give_the_spec():
    library, config = _library(image_size=12, patch_size=3, num_channels=2, hidden_size=24, num_attention_heads=3,
                               num_hidden_layers=3, num_labels=5)
    spec = _spec(config)
    for p in spec.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(2, 2, 12, 12, dtype=torch.float64)
    assert_spec_into_library("vit", spec, library, config.num_hidden_layers, lambda m: m(x), lambda m: m(x).logits)


def test_a_reshaping_link_without_the_other_sides_shapes_is_refused_by_name():
    library, config = _library()
    with pytest.raises(weights.WeightMapError, match=r"p\.psi\.weight is reshaped"):
        weights.to_spec("vit", library.state_dict(), config.num_hidden_layers)
    spec = _spec(config)
    wrong = dict(spec.state_dict(), **{"p.psi.weight": torch.zeros(32, 47)})
    with pytest.raises(weights.WeightMapError, match=r"1504 entries"):
        weights.to_library("vit", wrong, config.num_hidden_layers, library.state_dict())
