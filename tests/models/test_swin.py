"""specs/swin.rpn equals transformers' SwinForImageClassification and SwinModel in float64 (small random
configurations, nothing downloaded): the library's weights loaded into the compiled spec by the "swin" weight map
give its logits and every parameter's gradient, in both lowerings, and the spec's weights loaded into the library
model give the spec's logits. Four stages of unequal depths ([2, 2, 6, 2]), three of odd ones ([3, 1, 5]), plain
and shifted windows alternating block by block, the last stage's window covering its grid (no shift there, as
SwinLayer clamps it), relative position biases, patch merging between the stages."""

from __future__ import annotations

import pytest
import torch

from rpn2c.frontends import weights
from tests.models.peers import assert_library_into_spec, assert_spec_into_library, compiled, parameters, randomise

transformers = pytest.importorskip("transformers")

NORMS = ("pre.0.weight", "ln1.weight", "n.weight", "e.weight")


def _config(**over):
    cfg = dict(image_size=32, patch_size=2, num_channels=3, embed_dim=8, depths=[2, 2, 6, 2], num_heads=[1, 2, 4, 8],
               window_size=2, num_labels=10)
    cfg.update(over)
    return transformers.SwinConfig(**cfg, attn_implementation="sdpa")


def _library(cls: str = "SwinForImageClassification", **over):
    config = _config(**over)
    torch.manual_seed(0)
    return randomise(getattr(transformers, cls)(config), ("norm",)).double().eval(), config


def _spec(config, reference: bool = False, model: str = "swin"):
    params = {"size": config.image_size, "patch": config.patch_size, "channels": config.num_channels,
              "d": config.embed_dim, "window": config.window_size, "depths": list(config.depths),
              "heads": list(config.num_heads), "eps": config.layer_norm_eps}
    if model == "swin":
        params["classes"] = config.num_labels
    return compiled("swin", model, params, reference)


def _image(config, batch: int = 2):
    return torch.randn(batch, config.num_channels, config.image_size, config.image_size, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(batch))


@pytest.mark.parametrize("reference", [False, True])
def test_library_weights_into_the_spec_give_the_library_model(reference):
    library, config = _library()
    spec, x = _spec(config, reference), _image(config)
    assert_library_into_spec("swin", library, spec, config.depths, lambda m: m(x).logits, lambda m: m(x),
                             count=197008)


def test_odd_depths_three_stages_and_wider_windows_both_ways():
    """Windows of 4 (shift 2) on a 16 x 16, an 8 x 8 and a 4 x 4 grid (one window: no shift), depths 3, 1, 5 (a
    stage ending on a plain block, one of a single block), other widths and head counts."""
    library, config = _library(image_size=32, patch_size=2, num_channels=2, embed_dim=12, depths=[3, 1, 5],
                               num_heads=[3, 2, 4], window_size=4, num_labels=5)
    spec, x = _spec(config), _image(config, 3)
    assert_library_into_spec("swin", library, spec, config.depths, lambda m: m(x).logits, lambda m: m(x))
    randomise(spec, NORMS)
    assert_spec_into_library("swin", spec, library, config.depths, lambda m: m(x), lambda m: m(x).logits)


@pytest.mark.parametrize("reference", [False, True])
def test_grids_the_library_pads_and_windows_it_clamps_both_ways(reference):
    """Windows of 3 on a 10 x 10 grid (padded to 12 x 12: the zero items attend as keys with the projections'
    biases) and on a 5 x 5 one (padded to 6 x 6), the odd 5 x 5 grid padded to 6 x 6 before patch merging, and a
    3 x 3 last stage that is one window (unshifted), as SwinLayer and SwinPatchMerging do."""
    library, config = _library(image_size=20, patch_size=2, num_channels=2, embed_dim=6, depths=[2, 2, 2],
                               num_heads=[1, 2, 3], window_size=3, num_labels=4)
    spec, x = _spec(config, reference), _image(config)
    assert_library_into_spec("swin", library, spec, config.depths, lambda m: m(x).logits, lambda m: m(x))
    randomise(spec, NORMS)
    assert_spec_into_library("swin", spec, library, config.depths, lambda m: m(x), lambda m: m(x).logits)
    graph = spec.graph
    assert graph.node("f.s.blocks.1.p").type.items == 144 and graph.node("f.down.1.e").type.items == 36
    assert _shift(graph, "f.down.0.s.blocks.1.attn") == 1 and _shift(graph, "f.down.1.s.blocks.1.attn") == 0


def test_swin_model_gives_the_last_hidden_state_and_the_pooled_output_both_ways():
    base, config = _library("SwinModel")
    spec, x = _spec(config, model="swin_model"), _image(config)

    def hidden(m):
        out = m(x)
        return out.last_hidden_state, out.pooler_output

    assert_library_into_spec("swin_model", base, spec, config.depths, hidden, lambda m: m(x))
    randomise(spec, NORMS)
    assert_spec_into_library("swin_model", spec, base, config.depths, lambda m: m(x), hidden)


def test_blocks_alternate_their_shift_and_a_window_covering_the_grid_is_not_shifted():
    """Block i of a stage shifts by i % 2 · (w // 2); the last stage's 2 x 2 grid is one window, unshifted."""
    spec = _spec(_config())
    graph = spec.graph
    stages = ["f.s.blocks", "f.down.0.s.blocks", "f.down.1.s.blocks", "f.down.2.s.blocks"]
    want = [[0, 1], [0, 1], [0, 1, 0, 1, 0, 1], [0, 0]]
    got = [[_shift(graph, f"{stage}.{i}.attn") for i in range(len(w))] for stage, w in zip(stages, want)]
    assert got == want and parameters(spec) == graph.param_count


def _shift(graph, node_id: str) -> int:
    """The shift of a window attention head's ξ, as the checker resolved its hyper-parameters."""
    return graph.node(node_id).layer.heads[0].xi["xi_instance"].component.hp.shift


def test_the_map_names_every_tensor_of_both_sides():
    library, config = _library()
    spec = _spec(config)
    state = dict(library.state_dict())
    state.pop("swin.encoder.layers.2.blocks.5.attention.relative_position_bias.relative_position_bias_table")
    with pytest.raises(weights.WeightMapError, match=r"layers\.2\.blocks\.5\.attention\.relative_position_bias"):
        weights.to_spec("swin", state, config.depths, spec.state_dict())
    with pytest.raises(weights.WeightMapError, match=r"swin: layers is the block count of each stage"):
        weights.to_spec("swin", library.state_dict(), 2, spec.state_dict())
    with pytest.raises(weights.WeightMapError, match=r"places no spec tensor for the library's swin\.encoder\.layers"
                                                     r"\.2\.blocks\.5"):
        weights.to_spec("swin", library.state_dict(), [2, 2, 5, 2], spec.state_dict())
