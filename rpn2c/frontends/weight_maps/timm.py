"""The shipped vision specs ↔ timm's own classes: ``specs/vit.rpn`` ↔ ``timm.models.vision_transformer
.VisionTransformer`` ("timm_vit": fused qkv, class token, learned positions, ``global_pool="token"``) and
``specs/swin.rpn`` ↔ ``timm.models.swin_transformer.SwinTransformer`` ("timm_swin"). ``specs/mixer.rpn``'s map
"mixer" is timm's ``MlpMixer`` layout already (``weight_maps/mixer.py``).

    spec (vit)                             timm VisionTransformer
    p.psi.weight, p.bias                   patch_embed.proj.{weight,bias}, [d, C, p, p] as [d, C·p·p]
    c.token                                cls_token, [1, 1, d] as [d]
    e.weight                               pos_embed, [1, T+1, d] as [T+1, d] (the class token's row first)
    h.{i}.attn.pre.0.*                     blocks.{i}.norm1.*
    h.{i}.attn.in_proj_{weight,bias}       blocks.{i}.attn.qkv.{weight,bias} (already q, k, v row after row)
    h.{i}.attn.fusion.linear.*             blocks.{i}.attn.proj.*
    h.{i}.n.*                              blocks.{i}.norm2.*
    h.{i}.ff.*, h.{i}.ff2.*                blocks.{i}.mlp.fc1.*, blocks.{i}.mlp.fc2.*
    n.*, y.psi.weight, y.bias              norm.*, head.{weight,bias}

    spec (swin)                            timm SwinTransformer
    f.p.psi.weight, f.p.bias               patch_embed.proj.*, [d, C, p, p] as [d, C·p·p]
    f.e.*                                  patch_embed.norm.*
    {stage}.blocks.{i}.b.table             layers.{k}.blocks.{i}.attn.relative_position_bias_table
    {stage}.blocks.{i}.ln1.*               … blocks.{i}.norm1.*
    {stage}.blocks.{i}.attn.in_proj_*      … blocks.{i}.attn.qkv.*
    {stage}.blocks.{i}.attn.fusion.linear.*   … blocks.{i}.attn.proj.*
    {stage}.blocks.{i}.n.*, ff.*, ff2.*    … blocks.{i}.norm2.*, mlp.fc1.*, mlp.fc2.*
    f.down.{k-1}.r.pre.0.*, r.psi.weight   layers.{k}.downsample.norm.*, layers.{k}.downsample.reduction.weight
    f.n.*, y.psi.weight, y.bias            norm.*, head.fc.{weight,bias}

with ``{stage}`` = ``f.s`` for k = 0 and ``f.down.{k-1}.s`` after: timm's stage k (k ≥ 1) starts with the patch
merging that transformers puts at the end of stage k − 1. ``layers`` is timm's ``depths``; the relative position
index and the shifted windows' mask are buffers timm does not save (nor does the spec). The reshaping links need
the other side's state_dict as ``shapes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rpn2c.frontends.weight_maps.swin import StagedMap
from rpn2c.frontends.weights import Link, WeightMap

_WB = ("weight", "bias")


def _same(spec: str, library: str) -> tuple[Link, ...]:
    """``spec.{weight,bias}`` = ``library.{weight,bias}``."""
    return tuple(Link(f"{spec}.{w}", (f"{library}.{w}",)) for w in _WB)


def _affine(spec: str, library: str) -> tuple[Link, Link]:
    """A perceptron head ``spec`` (``psi.weight``, ``bias``) = the linear layer ``library``."""
    return Link(f"{spec}.psi.weight", (f"{library}.weight",)), Link(f"{spec}.bias", (f"{library}.bias",))


def _encoder(spec: str, lib: str, norm1: str = "attn.pre.0") -> tuple[Link, ...]:
    """A pre-norm encoder block of timm's ``Block`` / ``SwinTransformerBlock`` (``norm1``, ``attn.qkv``,
    ``attn.proj``, ``norm2``, ``mlp``) as the spec's attention head ``attn`` (its first norm ``norm1``: the head's
    ``pre``, or Swin's ``ln1`` before the grid's padding), norm ``n`` and heads ``ff``, ``ff2``."""
    return (*_same(f"{spec}{norm1}", f"{lib}norm1"),
            *(Link(f"{spec}attn.in_proj_{w}", (f"{lib}attn.qkv.{w}",)) for w in _WB),
            *_same(f"{spec}attn.fusion.linear", f"{lib}attn.proj"), *_same(f"{spec}n", f"{lib}norm2"),
            *_affine(f"{spec}ff", f"{lib}mlp.fc1"), *_affine(f"{spec}ff2", f"{lib}mlp.fc2"))


@dataclass(frozen=True)
class TimmStagedMap(StagedMap):
    """timm's Swin stages: blocks ``layers.{k}.blocks.{i}``, the patch merging at the start of stage k ≥ 1."""

    def stage_links(self, k: int) -> tuple[Link, ...]:
        spec = ("f.s." if k == 0 else f"f.down.{k - 1}.s.") + "blocks.{i}."
        lib = f"layers.{k}.blocks.{{i}}."
        block = (Link(spec + "b.table", (lib + "attn.relative_position_bias_table",)), *_encoder(spec, lib, "ln1"))
        if not k:
            return block
        down, merge = f"f.down.{k - 1}.r.", f"layers.{k}.downsample."
        return block + (*_same(down + "pre.0", merge + "norm"),
                        Link(down + "psi.weight", (merge + "reduction.weight",)))


MAPS = {
    "timm_vit": WeightMap("timm_vit", (
        Link("p.psi.weight", ("patch_embed.proj.weight",), reshape=True),
        Link("p.bias", ("patch_embed.proj.bias",)),
        Link("c.token", ("cls_token",), reshape=True),
        Link("e.weight", ("pos_embed",), reshape=True),
        *_encoder("h.{i}.", "blocks.{i}."),
        *_same("n", "norm"), *_affine("y", "head"),
    )),
    "timm_swin": TimmStagedMap("timm_swin", (
        Link("f.p.psi.weight", ("patch_embed.proj.weight",), reshape=True),
        Link("f.p.bias", ("patch_embed.proj.bias",)),
        *_same("f.e", "patch_embed.norm"), *_same("f.n", "norm"), *_affine("y", "head.fc"),
    )),
}
