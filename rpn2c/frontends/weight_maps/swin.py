"""``specs/swin.rpn`` ↔ transformers' ``SwinForImageClassification`` ("swin") and ``SwinModel`` ("swin_model": the
same keys without ``swin.`` and no classifier). ``layers`` is SwinConfig's ``depths``, one block count per stage
(``weights.to_spec("swin", hf.state_dict(), config.depths, spec.state_dict())``); stage 0 is the spec's ``f.s``,
stage k ≥ 1 its ``f.down.{k-1}`` (the patch merging that ends the library's stage k − 1, then stage k's blocks).

    spec                                     transformers
    f.p.psi.weight, f.p.bias                 swin.embeddings.patch_embeddings.projection.*, [d, C, p, p] as [d, C·p·p]
    f.e.{weight,bias}                        swin.embeddings.norm.*
    {stage}.blocks.{i}.b.table               swin.encoder.layers.{k}.blocks.{i}.attention
                                             .relative_position_bias.relative_position_bias_table
    {stage}.blocks.{i}.ln1.*                 … blocks.{i}.layernorm_before.*
    {stage}.blocks.{i}.attn.in_proj_weight   … blocks.{i}.attention.{q,k,v}_proj.weight, row after row
    {stage}.blocks.{i}.attn.in_proj_bias     … blocks.{i}.attention.{q,k,v}_proj.bias, one after another
    {stage}.blocks.{i}.attn.fusion.linear.*  … blocks.{i}.attention.o_proj.*
    {stage}.blocks.{i}.n.*                   … blocks.{i}.layernorm_after.*
    {stage}.blocks.{i}.ff.{psi.weight,bias}, ff2.*   … blocks.{i}.mlp.fc1.*, mlp.fc2.*
    f.down.{k-1}.r.pre.0.*, r.psi.weight     swin.encoder.layers.{k-1}.downsample.norm.*, downsample.reduction.weight
    f.n.{weight,bias}                        swin.layernorm.*
    y.psi.weight, y.bias                     classifier.*

with ``{stage}`` = ``f.s`` for k = 0 and ``f.down.{k-1}.s`` after. Each block's ``relative_position_index`` is a
buffer the library recomputes from the window size (the spec's ``window_bias`` holds it as a non-persistent buffer
too). The patch kernel's link reshapes: pass the other side's state_dict as ``shapes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rpn2c.frontends.weights import Link, WeightMap, WeightMapError


def _block(stage: int, lib_root: str) -> tuple[Link, ...]:
    """Block ``{i}`` of stage ``stage``: the spec's ``{stage}.blocks.{i}``, the library's ``layers.{stage}.blocks.{i}``."""
    spec = ("f.s." if stage == 0 else f"f.down.{stage - 1}.s.") + "blocks.{i}."
    lib = f"{lib_root}encoder.layers.{stage}.blocks.{{i}}."

    def pair(s: str, l: str) -> tuple[Link, Link]:
        return tuple(Link(spec + s.format(w=w), (lib + l.format(w=w),)) for w in ("weight", "bias"))

    return (
        Link(spec + "b.table", (lib + "attention.relative_position_bias.relative_position_bias_table",)),
        *pair("ln1.{w}", "layernorm_before.{w}"),
        *(Link(spec + f"attn.in_proj_{w}", tuple(lib + f"attention.{p}_proj.{w}" for p in "qkv"))
          for w in ("weight", "bias")),
        *pair("attn.fusion.linear.{w}", "attention.o_proj.{w}"),
        *pair("n.{w}", "layernorm_after.{w}"),
        *(Link(spec + f"{head}.{part}", (lib + f"mlp.{fc}.{w}",))
          for head, fc in (("ff", "fc1"), ("ff2", "fc2")) for part, w in (("psi.weight", "weight"), ("bias", "bias"))),
    )


def _merge(stage: int, root: str) -> tuple[Link, ...]:
    """The patch merging into stage ``stage`` (≥ 1): the library's ``downsample`` of stage ``stage − 1``."""
    spec, lib = f"f.down.{stage - 1}.r.", f"{root}encoder.layers.{stage - 1}.downsample."
    return (*(Link(f"{spec}pre.0.{w}", (f"{lib}norm.{w}",)) for w in ("weight", "bias")),
            Link(f"{spec}psi.weight", (f"{lib}reduction.weight",)))


@dataclass(frozen=True)
class StagedMap(WeightMap):
    """A map whose ``layers`` is one block count per stage (SwinConfig's ``depths``): stage k's block links repeat
    ``layers[k]`` times (with the patch merging before it, k ≥ 1, once), the ``links`` once; library keys start
    with ``root``."""

    root: str = ""

    def expand(self, layers: Sequence[int]) -> list[Link]:
        if isinstance(layers, int) or not all(isinstance(n, int) and n >= 1 for n in layers) or not layers:
            raise WeightMapError(f"{self.name}: layers is the block count of each stage (SwinConfig's depths, such "
                                 f"as [2, 2, 6, 2]), got {layers!r}")
        out = list(self.links)
        for k, depth in enumerate(layers):
            out += WeightMap(self.name, self.stage_links(k)).expand(depth)
        return out

    def stage_links(self, k: int) -> tuple[Link, ...]:
        """Stage ``k``'s links: its blocks' (holding ``{i}``) and, for k ≥ 1, the patch merging into it."""
        return _block(k, self.root) + (_merge(k, self.root) if k else ())


def _features(root: str) -> tuple[Link, ...]:
    """The links of ``swin_features`` outside the stages (spec ``f.``) to a ``SwinModel`` whose keys start with
    ``root``."""
    emb = root + "embeddings."
    return (
        Link("f.p.psi.weight", (emb + "patch_embeddings.projection.weight",), reshape=True),
        Link("f.p.bias", (emb + "patch_embeddings.projection.bias",)),
        *(Link(f"f.e.{w}", (emb + f"norm.{w}",)) for w in ("weight", "bias")),
        *(Link(f"f.n.{w}", (root + f"layernorm.{w}",)) for w in ("weight", "bias")),
    )


MAPS = {
    "swin": StagedMap("swin", _features("swin.") + (Link("y.psi.weight", ("classifier.weight",)),
                                                     Link("y.bias", ("classifier.bias",))), root="swin."),
    "swin_model": StagedMap("swin_model", _features("")),
}
