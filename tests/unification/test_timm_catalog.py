"""timm's models as users have them come back through ``rpn2c.from_torch`` as the same trainable model.

Each model is built by timm (``timm.create_model`` or the model class, small configurations, ``pretrained=False``:
nothing downloaded) with a seed, converted, compiled in both lowerings and compared in float64 by
``assert_same_model``: the output, the input gradient, the parameter gradients mapped back to timm's names and the
number of free parameters. A model that does not convert stays listed with the located error it hits (a strict
xfail). docs/unification.md ("timm models") shows the same table. Run where timm is installed (README, "Testing
with timm"); the main environment skips the file.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import rand

from rpn2c.frontends import TorchImportError

timm = pytest.importorskip("timm")


def _create(name: str, **kw) -> Callable[[], nn.Module]:
    def build():
        torch.manual_seed(0)
        return timm.create_model(name, pretrained=False, **kw)
    return build


def _cls(path: str, **kw) -> Callable[[], nn.Module]:
    """A timm model class (``module.Class``) built with ``kw``."""
    def build():
        module, cls = path.rsplit(".", 1)
        torch.manual_seed(0)
        return getattr(getattr(timm.models, module), cls)(**kw)
    return build


def _resnet(layers) -> Callable[[], nn.Module]:
    def build():
        torch.manual_seed(0)
        return timm.models.resnet.ResNet(timm.models.resnet.BasicBlock, layers, num_classes=5)
    return build


def _efficientnet(channels: float, depth: float) -> Callable[[], nn.Module]:
    """EfficientNet-B0's architecture (MBConv blocks: depthwise convs, squeeze-excitation, BatchNormAct2d, SiLU)
    scaled by timm's own multipliers, as ``efficientnet_b0`` builds it with 1.0 and 1.0."""
    def build():
        torch.manual_seed(0)
        return timm.models.efficientnet._gen_efficientnet("efficientnet_b0", channel_multiplier=channels,
                                                          depth_multiplier=depth, pretrained=False, num_classes=5)
    return build


def _image(size: int) -> Callable[[], tuple]:
    return lambda: (rand(2, 3, size, size, seed=1),)


_SWIN = ("SwinTransformerBlock: `B, H, W, C = x.shape` on a channels-last grid, then window partition, torch.roll "
         "and the shifted windows' mask: no recogniser maps them onto window_attention yet")

# name: (build, inputs, refuses (the located error while it does not convert), slow)
CASES: dict[str, tuple] = {
    "resnet_basic_1111": (_resnet([1, 1, 1, 1]), _image(32), None, False),
    "resnet18": (_create("resnet18", num_classes=5), _image(32), None, True),
    "convnext_atto": (_create("convnext_atto", num_classes=5, dims=(8, 16, 24, 32), depths=(1, 1, 1, 1)),
                      _image(32), None, False),
    "efficientnet_b0_small": (_efficientnet(0.25, 0.25), _image(32), None, False),
    "efficientnet_b0": (_create("efficientnet_b0", num_classes=5), _image(32), None, True),
    "vit": (_cls("vision_transformer.VisionTransformer", img_size=16, patch_size=4, embed_dim=16, depth=2,
                 num_heads=2, num_classes=5), _image(16), None, False),
    "deit_distilled": (_cls("deit.VisionTransformerDistilled", img_size=16, patch_size=4, embed_dim=16, depth=2,
                            num_heads=2, num_classes=5), _image(16), None, False),
    "mixer": (_cls("mlp_mixer.MlpMixer", img_size=16, patch_size=4, embed_dim=16, num_blocks=2, num_classes=5),
              _image(16), None, False),
    "mobilenetv3_small_050": (_create("mobilenetv3_small_050", num_classes=5), _image(32), None, True),
    "regnetx_002": (_create("regnetx_002", num_classes=5), _image(32), None, True),
    "efficientnet_lite0": (_create("efficientnet_lite0", num_classes=5), _image(32), None, True),
    "resnet50": (_create("resnet50", num_classes=5), _image(32), None, True),
    "vit_tiny_2_layers": (_create("vit_tiny_patch16_224", num_classes=5, img_size=32, depth=2), _image(32), None,
                          True),
    "deit3_small_2_layers": (_create("deit3_small_patch16_224", num_classes=5, img_size=32, depth=2), _image(32),
                             None, True),
    "swin": (_cls("swin_transformer.SwinTransformer", img_size=16, patch_size=2, window_size=2, embed_dim=8,
                  depths=(2, 2), num_heads=(1, 2), num_classes=5), _image(16), _SWIN, False),
}


def _params():
    for name, (build, inputs, refuses, slow) in CASES.items():
        marks = [pytest.mark.slow] if slow else []
        if refuses:
            marks.append(pytest.mark.xfail(raises=TorchImportError, strict=True, reason=refuses))
        yield pytest.param(build, inputs, id=name, marks=marks)


@pytest.mark.parametrize("build, inputs", list(_params()))
def test_timm_model_converts_equal(build, inputs):
    assert_same_model(build(), inputs())


def test_a_refusal_inside_timm_names_timms_line_and_the_module():
    """Swin's first refusal names the block where conversion stopped and timm's own source line."""
    import rpn2c

    build, inputs, _, _ = CASES["swin"]
    with pytest.raises(TorchImportError) as info:
        rpn2c.from_torch(build().double().eval(), inputs())
    err = info.value
    assert err.module_path == "layers.0.blocks.0" and err.library_file.endswith("swin_transformer.py")
    assert "channels-last" in str(err)
