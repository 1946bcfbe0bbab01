"""``specs/vit.rpn`` ↔ transformers' ``ViTForImageClassification`` (``add_pooling_layer`` off, as it builds it).

    spec                              transformers
    p.psi.weight                      vit.embeddings.patch_embeddings.projection.weight, [d, C, p, p] as [d, C·p·p]
    p.bias                            vit.embeddings.patch_embeddings.projection.bias
    c.token                           vit.embeddings.cls_token, [1, 1, d] as [d]
    e.weight                          vit.embeddings.position_embeddings, [1, T+1, d] as [T+1, d]
    h.{i}.attn.pre.0.{weight,bias}    vit.layers.{i}.layernorm_before.{weight,bias}
    h.{i}.attn.in_proj_weight         vit.layers.{i}.attention.{q,k,v}_proj.weight, row after row
    h.{i}.attn.in_proj_bias           vit.layers.{i}.attention.{q,k,v}_proj.bias, one after another
    h.{i}.attn.fusion.linear.*        vit.layers.{i}.attention.o_proj.*
    h.{i}.n.{weight,bias}             vit.layers.{i}.layernorm_after.{weight,bias}
    h.{i}.ff.psi.weight, h.{i}.ff.bias      vit.layers.{i}.mlp.fc1.{weight,bias}
    h.{i}.ff2.psi.weight, h.{i}.ff2.bias    vit.layers.{i}.mlp.fc2.{weight,bias}
    n.{weight,bias}                   vit.layernorm.{weight,bias}
    y.psi.weight, y.bias              classifier.{weight,bias}

The reshaping links need the other side's shapes: ``weights.to_spec("vit", hf.state_dict(), layers,
spec.state_dict())``, ``weights.to_library("vit", spec.state_dict(), layers, hf.state_dict())``.
"""

from rpn2c.frontends.weights import Link, WeightMap

_LAYER = "vit.layers.{i}."
_EMB = "vit.embeddings."


def _affine(spec: str, library: str) -> tuple[Link, Link]:
    """A linear map's weight and bias: spec ``<spec>.psi.weight`` / ``<spec>.bias`` (a perceptron head)."""
    return Link(f"{spec}.psi.weight", (f"{library}.weight",)), Link(f"{spec}.bias", (f"{library}.bias",))


MAPS = {
    "vit": WeightMap("vit", (
        Link("p.psi.weight", (_EMB + "patch_embeddings.projection.weight",), reshape=True),
        Link("p.bias", (_EMB + "patch_embeddings.projection.bias",)),
        Link("c.token", (_EMB + "cls_token",), reshape=True),
        Link("e.weight", (_EMB + "position_embeddings",), reshape=True),
        *(Link(f"h.{{i}}.attn.pre.0.{w}", (_LAYER + f"layernorm_before.{w}",)) for w in ("weight", "bias")),
        *(Link(f"h.{{i}}.attn.in_proj_{w}", tuple(_LAYER + f"attention.{p}_proj.{w}" for p in "qkv"))
          for w in ("weight", "bias")),
        *(Link(f"h.{{i}}.attn.fusion.linear.{w}", (_LAYER + f"attention.o_proj.{w}",)) for w in ("weight", "bias")),
        *(Link(f"h.{{i}}.n.{w}", (_LAYER + f"layernorm_after.{w}",)) for w in ("weight", "bias")),
        *_affine("h.{i}.ff", _LAYER + "mlp.fc1"),
        *_affine("h.{i}.ff2", _LAYER + "mlp.fc2"),
        *(Link(f"n.{w}", (f"vit.layernorm.{w}",)) for w in ("weight", "bias")),
        *_affine("y", "classifier"),
    )),
}
