"""The shipped vision specs equal timm's own classes in float64 (small random configurations, nothing downloaded):
``specs/vit.rpn`` = ``VisionTransformer`` (fused qkv, class token, learned positions; map "timm_vit"),
``specs/mixer.rpn`` = ``MlpMixer`` (map "mixer"), ``specs/swin.rpn`` = ``SwinTransformer`` (map "timm_swin").
timm's weights moved into the compiled spec give timm's logits and every parameter's gradient, in both lowerings;
the spec's weights moved into timm's model give the spec's logits. Run in an environment with timm (README,
"Testing with timm")."""

from __future__ import annotations

import pytest
import torch

from tests.models.peers import assert_library_into_spec, assert_spec_into_library, compiled, randomise

timm = pytest.importorskip("timm")


def _timm(cls, **cfg):
    torch.manual_seed(1)
    return randomise(cls(**cfg).double().eval(), norms=("norm",))


def _image(cfg: dict, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, cfg["in_chans"], cfg["img_size"], cfg["img_size"], dtype=torch.float64,
                       generator=torch.Generator().manual_seed(2))


def _sizes(cfg: dict, library) -> dict:
    """The spec parameters every family shares."""
    return {"size": cfg["img_size"], "patch": cfg["patch_size"], "channels": cfg["in_chans"], "d": cfg["embed_dim"],
            "classes": cfg["num_classes"], "eps": library.norm.eps}


VIT = [dict(img_size=16, patch_size=4, in_chans=3, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=10),
       dict(img_size=12, patch_size=3, in_chans=2, embed_dim=24, depth=3, num_heads=3, mlp_ratio=1.5, num_classes=5)]
MIXER = [dict(img_size=16, patch_size=4, in_chans=3, embed_dim=32, num_blocks=2, mlp_ratio=(0.25, 2.0),
              num_classes=10),
         dict(img_size=12, patch_size=3, in_chans=2, embed_dim=24, num_blocks=3, mlp_ratio=(0.5, 1.5), num_classes=5)]
SWIN = [dict(img_size=16, patch_size=2, in_chans=3, window_size=2, embed_dim=8, depths=(2, 2), num_heads=(1, 2),
             num_classes=10),
        dict(img_size=16, patch_size=2, in_chans=2, window_size=2, embed_dim=6, depths=(2, 1, 2),
             num_heads=(2, 3, 4), num_classes=5),
        # windows of 4 on an 8 x 8 grid, a 4 x 4 one (one window, unshifted) and a 2 x 2 last stage smaller than
        # the window: timm clamps the window to the grid, with a bias table of its own size
        dict(img_size=16, patch_size=2, in_chans=2, window_size=4, embed_dim=6, depths=(2, 2, 2),
             num_heads=(1, 2, 3), num_classes=4)]


def _vit(cfg: dict, reference: bool = False):
    library = _timm(timm.models.vision_transformer.VisionTransformer, **cfg)
    params = dict(_sizes(cfg, library), heads=cfg["num_heads"], ffn=int(cfg["embed_dim"] * cfg["mlp_ratio"]),
                  layers=cfg["depth"])
    return library, compiled("vit", "vit", params, reference)


def _mixer(cfg: dict, reference: bool = False):
    library = _timm(timm.models.mlp_mixer.MlpMixer, **cfg)
    d, (tok, ch) = cfg["embed_dim"], cfg["mlp_ratio"]
    params = dict(_sizes(cfg, library), token_dim=int(tok * d), channel_dim=int(ch * d), layers=cfg["num_blocks"])
    return library, compiled("mixer", "mixer", params, reference)


def _swin(cfg: dict, reference: bool = False):
    library = _timm(timm.models.swin_transformer.SwinTransformer, **cfg)
    params = dict(_sizes(cfg, library), window=cfg["window_size"], depths=list(cfg["depths"]),
                  heads=list(cfg["num_heads"]))
    return library, compiled("swin", "swin", params, reference)


# family: (build (cfg, reference) -> (timm model, compiled spec), weight map, the map's layers from cfg, configs)
FAMILIES = {
    "vit": (_vit, "timm_vit", lambda c: c["depth"], VIT),
    "mixer": (_mixer, "mixer", lambda c: c["num_blocks"], MIXER),
    "swin": (_swin, "timm_swin", lambda c: list(c["depths"]), SWIN),
}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("reference", [False, True])
def test_timm_weights_into_the_spec_give_timms_model(family, reference):
    """Outputs to 1e-12 and every timm parameter's gradient to 1e-11, the parameter counts equal."""
    build, name, layers, configs = FAMILIES[family]
    library, spec = build(configs[0], reference)
    x = _image(configs[0])
    assert_library_into_spec(name, library, spec, layers(configs[0]), lambda m: m(x), grad_atol=1e-11)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_spec_weights_into_timms_model_give_the_spec(family):
    build, name, layers, configs = FAMILIES[family]
    library, spec = build(configs[1])
    randomise(spec)
    x = _image(configs[1])
    assert_spec_into_library(name, spec, library, layers(configs[1]), lambda m: m(x), lambda m: m(x))


@pytest.mark.parametrize("reference", [False, True])
def test_timm_swin_clamps_a_window_larger_than_the_grid_as_the_spec_does(reference):
    cfg = SWIN[2]
    library, spec = _swin(cfg, reference)
    x = _image(cfg)
    assert_library_into_spec("timm_swin", library, spec, list(cfg["depths"]), lambda m: m(x), grad_atol=1e-11)
    assert spec.state_dict()["f.down.1.s.blocks.0.b.table"].shape == (9, 3)


def test_timm_swin_places_its_patch_merging_at_the_start_of_a_stage():
    """timm's stage k ≥ 1 begins with the merging that transformers ends stage k − 1 with: the map names timm's."""
    from rpn2c.frontends import weights

    keys = {link.library[0] for link in weights.get("timm_swin").expand([2, 1, 2])}
    assert {"layers.1.downsample.reduction.weight", "layers.2.downsample.norm.bias"} <= keys
    assert not any(k.startswith("layers.0.downsample") for k in keys)
