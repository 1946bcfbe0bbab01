"""Patch-based geometric expansion κ: a grid's patches gathered as channels (RPN 2 §7.1, eq 63–67).

Every entry builds a :class:`PatchGatherModule`: [C, *S] -> [C·p, *S'], the p taps of each patch (conv-style,
centred cuboid, cylinder or sphere, :mod:`rpn2c.components.grid`) as channels; out-of-grid taps read 0. The index
tables come from :mod:`rpn2c.functional.structure`. The tinyBIG class names are registered as aliases.
"""

from __future__ import annotations

from rpn2c.components.base import GRID_VOLUME, Kappa, ShapeRuleError, compress_example
from rpn2c.components.grid import Geometry, PatchHP, index_elements
from rpn2c.components.kappa import CentredCuboidHP, CylinderHP, SphereHP
from rpn2c.components.registry import register


class _PatchExpansion(Kappa):
    """Geometric patch expansion: grid [C, *S] -> [C·p, *S'], every patch's p taps as channels."""

    family = "expansion"
    grid_only = True

    def geometry(self, rank: int) -> Geometry:
        hp = self.hp
        return hp.to_geometry(rank) if hasattr(hp, "to_geometry") else hp.geometry(rank)

    def unfolds(self, rank: int) -> bool:
        """A zero-padded box of taps on a lattice of a 2-D grid: im2col's patches."""
        geo = self.geometry(rank)
        return rank == 2 and geo.taps is None and geo.padding_mode == "zeros" and not geo.staggered

    def features_out(self, feat):
        if len(feat) < 2:
            raise ShapeRuleError(f"{self.name} gathers patches of a grid; the input has flat features {feat}")
        geo = self.geometry(len(feat) - 1)
        return (feat[0] * geo.patch_size, *geo.out_spatial(tuple(feat[1:])))

    def scratch(self, feat):
        """What building the (patch, tap) index makes (:func:`index_elements`); the taps gathered are the output."""
        geo = self.geometry(len(feat) - 1)
        return index_elements(geo, tuple(feat[1:]), geo.patch_size)[0]

    def literal(self, feat):
        """Elements of the reference lowering's padding matrix ``[N + 1, P·p]`` (eq 67)."""
        geo = self.geometry(len(feat) - 1)
        return index_elements(geo, tuple(feat[1:]), geo.patch_size)[1]

    def build(self, feat):
        from rpn2c.components.impl.kappa_patches import PatchGatherModule

        return PatchGatherModule(self.geometry(len(feat) - 1), tuple(feat[1:]))


@register
class PatchExpansion(_PatchExpansion):
    """Patch expansion κ(x) = [x(patch_q)]_q (im2col; conv-style size, stride, pad, dilation): [C, *S] -> [C·p, *S']."""

    name = "patch_expansion"
    example_call = "patch_expansion(size = 2)"
    aliases = ("geometric_expansion",)
    HP = PatchHP


@register
class CuboidExpansion(_PatchExpansion):
    """Cuboid patch expansion κ(x) = [x(patch(c))]_c, patch(c) = c + [−p, p'] per axis (eq 63, 67): [C·p, ceil(S/s)]."""

    name = "cuboid_expansion"
    aliases = ("cuboid_patch_based_geometric_expansion",)
    HP = CentredCuboidHP


@register
class CylinderExpansion(_PatchExpansion):
    """Cylinder patch expansion κ(x) = [x(patch(c))]_c, ∇i² + ∇j² ≤ r², ∇k ∈ [−p_d, p'_d] (eq 65): [C·p, ceil(S/s)].

    Erratum (catalog §3.2): tinyBIG's cylinder ignores p_d (only symmetric depth); both bounds are honoured here.
    """

    name = "cylinder_expansion"
    aliases = ("cylinder_patch_based_geometric_expansion",)
    HP = CylinderHP


@register
class SphereExpansion(_PatchExpansion):
    """Sphere patch expansion κ(x) = [x(patch(c))]_c, ∇i² + ∇j² + ∇k² ≤ r² (eq 65) on a 3-D grid: [C·p, ceil(S/s)]."""

    name = "sphere_expansion"
    example = compress_example(GRID_VOLUME)
    aliases = ("sphere_patch_based_geometric_expansion",)
    HP = SphereHP

