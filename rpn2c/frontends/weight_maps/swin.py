"""``specs/swin.rpn`` ↔ transformers' ``SwinForImageClassification`` ("swin") and ``SwinModel`` ("swin_model": the
same keys without ``swin.`` and no classifier). Two stages of ``2·layers`` blocks each (``depths = [2·layers,
2·layers]``; ``layers`` is the spec's ``pairs``).

    spec                                  transformers
    f.p.psi.weight, f.p.bias              swin.embeddings.patch_embeddings.projection.*, [d, C, p, p] as [d, C·p·p]
    f.e.{weight,bias}                     swin.embeddings.norm.*
    f.s{t}.{i}.{a,b}.b.table              swin.encoder.layers.{t-1}.blocks.{2i, 2i+1}.attention
                                          .relative_position_bias.relative_position_bias_table
    f.s{t}.{i}.{a,b}.attn.pre.0.*         … blocks.{2i, 2i+1}.layernorm_before.*
    f.s{t}.{i}.{a,b}.attn.in_proj_weight  … blocks.{2i, 2i+1}.attention.{q,k,v}_proj.weight, row after row
    f.s{t}.{i}.{a,b}.attn.in_proj_bias    … blocks.{2i, 2i+1}.attention.{q,k,v}_proj.bias, one after another
    f.s{t}.{i}.{a,b}.attn.fusion.linear.* … blocks.{2i, 2i+1}.attention.o_proj.*
    f.s{t}.{i}.{a,b}.n.*                  … blocks.{2i, 2i+1}.layernorm_after.*
    f.s{t}.{i}.{a,b}.ff.{psi.weight,bias}, ff2.*   … blocks.{2i, 2i+1}.mlp.fc1.*, mlp.fc2.*
    f.r.pre.0.*, f.r.psi.weight           swin.encoder.layers.0.downsample.norm.*, downsample.reduction.weight
    f.n.{weight,bias}                     swin.layernorm.*
    y.psi.weight, y.bias                  classifier.*

Each block's ``relative_position_index`` is a buffer the library recomputes from the window size (the spec's
``window_bias`` holds it as a non-persistent buffer too). The patch kernel's link reshapes: pass the other side's
state_dict (``weights.to_spec("swin", hf.state_dict(), layers, spec.state_dict())``).
"""

from rpn2c.frontends.weights import Link, WeightMap


def _block(stage: int, which: str, offset: int, lib_root: str) -> tuple[Link, ...]:
    """Block ``which`` (a: plain, b: shifted) of each pair of stage ``stage`` (1, 2): library block 2i + offset."""
    spec, at = f"f.s{stage}.{{i}}.{which}.", (2, offset)
    lib = f"{lib_root}encoder.layers.{stage - 1}.blocks.{{i}}."

    def pair(s: str, l: str) -> tuple[Link, Link]:
        return tuple(Link(spec + s.format(w=w), (lib + l.format(w=w),), layer=at) for w in ("weight", "bias"))

    return (
        Link(spec + "b.table", (lib + "attention.relative_position_bias.relative_position_bias_table",), layer=at),
        *pair("attn.pre.0.{w}", "layernorm_before.{w}"),
        *(Link(spec + f"attn.in_proj_{w}", tuple(lib + f"attention.{p}_proj.{w}" for p in "qkv"), layer=at)
          for w in ("weight", "bias")),
        *pair("attn.fusion.linear.{w}", "attention.o_proj.{w}"),
        *pair("n.{w}", "layernorm_after.{w}"),
        *(Link(spec + f"{head}.{part}", (lib + f"mlp.{fc}.{w}",), layer=at)
          for head, fc in (("ff", "fc1"), ("ff2", "fc2")) for part, w in (("psi.weight", "weight"), ("bias", "bias"))),
    )


def _features(root: str) -> tuple[Link, ...]:
    """The links of ``swin_features`` (spec ``f.``) to a ``SwinModel`` whose keys start with ``root``."""
    emb = root + "embeddings."
    return (
        Link("f.p.psi.weight", (emb + "patch_embeddings.projection.weight",), reshape=True),
        Link("f.p.bias", (emb + "patch_embeddings.projection.bias",)),
        *(Link(f"f.e.{w}", (emb + f"norm.{w}",)) for w in ("weight", "bias")),
        *(link for stage in (1, 2) for which, offset in (("a", 0), ("b", 1))
          for link in _block(stage, which, offset, root)),
        *(Link(f"f.r.pre.0.{w}", (root + f"encoder.layers.0.downsample.norm.{w}",)) for w in ("weight", "bias")),
        Link("f.r.psi.weight", (root + "encoder.layers.0.downsample.reduction.weight",)),
        *(Link(f"f.n.{w}", (root + f"layernorm.{w}",)) for w in ("weight", "bias")),
    )


MAPS = {
    "swin": WeightMap("swin", _features("swin.") + (Link("y.psi.weight", ("classifier.weight",)),
                                                     Link("y.bias", ("classifier.bias",)))),
    "swin_model": WeightMap("swin_model", _features("")),
}
