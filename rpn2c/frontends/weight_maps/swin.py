"""``specs/swin.rpn`` ↔ transformers' ``SwinForImageClassification`` (two stages of ``2·layers`` blocks each:
``depths = [2·layers, 2·layers]``; ``layers`` is the spec's ``pairs``).

    spec                                  transformers
    p.psi.weight, p.bias                  swin.embeddings.patch_embeddings.projection.*, [d, C, p, p] as [d, C·p·p]
    e.{weight,bias}                       swin.embeddings.norm.*
    s{t}.{i}.{a,b}.b.table                swin.encoder.layers.{t-1}.blocks.{2i, 2i+1}.attention.relative_position_bias
                                          .relative_position_bias_table
    s{t}.{i}.{a,b}.attn.pre.0.*           … blocks.{2i, 2i+1}.layernorm_before.*
    s{t}.{i}.{a,b}.attn.in_proj_weight    … blocks.{2i, 2i+1}.attention.{q,k,v}_proj.weight, row after row
    s{t}.{i}.{a,b}.attn.in_proj_bias      … blocks.{2i, 2i+1}.attention.{q,k,v}_proj.bias, one after another
    s{t}.{i}.{a,b}.attn.fusion.linear.*   … blocks.{2i, 2i+1}.attention.o_proj.*
    s{t}.{i}.{a,b}.n.*                    … blocks.{2i, 2i+1}.layernorm_after.*
    s{t}.{i}.{a,b}.ff.psi.weight, ff.bias, ff2.psi.weight, ff2.bias    … blocks.{2i, 2i+1}.mlp.fc1.*, mlp.fc2.*
    r.pre.0.*, r.psi.weight               swin.encoder.layers.0.downsample.norm.*, downsample.reduction.weight
    n.{weight,bias}                       swin.layernorm.*
    y.psi.weight, y.bias                  classifier.*

Each block's ``relative_position_index`` is a buffer the library recomputes from the window size (the spec's
``window_bias`` holds it as a non-persistent buffer too). The patch kernel's link reshapes: pass the other side's
state_dict (``weights.to_spec("swin", hf.state_dict(), layers, spec.state_dict())``).
"""

from rpn2c.frontends.weights import Link, WeightMap

_EMB = "swin.embeddings."


def _block(stage: int, which: str, offset: int) -> tuple[Link, ...]:
    """Block ``which`` (a: plain, b: shifted) of each pair of stage ``stage`` (1, 2): library block 2i + offset."""
    spec, lib, at = f"s{stage}.{{i}}.{which}.", f"swin.encoder.layers.{stage - 1}.blocks.{{i}}.", (2, offset)

    def pair(s: str, l: str) -> tuple[Link, Link]:
        return tuple(Link(spec + s.format(w=w), (lib + l.format(w=w),), layer=at) for w in ("weight", "bias"))

    return (
        Link(spec + "b.table", (lib + "attention.relative_position_bias.relative_position_bias_table",), layer=at),
        *pair("attn.pre.0.{w}", "layernorm_before.{w}"),
        *(Link(spec + f"attn.in_proj_{w}", tuple(lib + f"attention.{p}_proj.{w}" for p in "qkv"), layer=at)
          for w in ("weight", "bias")),
        *pair("attn.fusion.linear.{w}", "attention.o_proj.{w}"),
        *pair("n.{w}", "layernorm_after.{w}"),
        Link(spec + "ff.psi.weight", (lib + "mlp.fc1.weight",), layer=at),
        Link(spec + "ff.bias", (lib + "mlp.fc1.bias",), layer=at),
        Link(spec + "ff2.psi.weight", (lib + "mlp.fc2.weight",), layer=at),
        Link(spec + "ff2.bias", (lib + "mlp.fc2.bias",), layer=at),
    )


MAPS = {
    "swin": WeightMap("swin", (
        Link("p.psi.weight", (_EMB + "patch_embeddings.projection.weight",), reshape=True),
        Link("p.bias", (_EMB + "patch_embeddings.projection.bias",)),
        *(Link(f"e.{w}", (_EMB + f"norm.{w}",)) for w in ("weight", "bias")),
        *(link for stage in (1, 2) for which, offset in (("a", 0), ("b", 1)) for link in _block(stage, which, offset)),
        *(Link(f"r.pre.0.{w}", (f"swin.encoder.layers.0.downsample.norm.{w}",)) for w in ("weight", "bias")),
        Link("r.psi.weight", ("swin.encoder.layers.0.downsample.reduction.weight",)),
        *(Link(f"n.{w}", (f"swin.layernorm.{w}",)) for w in ("weight", "bias")),
        Link("y.psi.weight", ("classifier.weight",)),
        Link("y.bias", ("classifier.bias",)),
    )),
}
