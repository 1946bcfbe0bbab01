"""``specs/bert.rpn`` ↔ transformers' ``BertModel`` ("bert") and ``BertForSequenceClassification``
("bert_classifier", whose encoder keys carry the prefix ``bert.``).

    spec                                  transformers
    e.w.weight                            embeddings.word_embeddings.weight
    e.p.weight                            embeddings.position_embeddings.weight
    e.t.weight                            embeddings.token_type_embeddings.weight
    e.e.{weight,bias}                     embeddings.LayerNorm.{weight,bias}
    h.{i}.attn.in_proj_weight             encoder.layer.{i}.attention.self.{query,key,value}.weight, row after row
    h.{i}.attn.in_proj_bias               encoder.layer.{i}.attention.self.{query,key,value}.bias, one after another
    h.{i}.attn.fusion.linear.{weight,bias}  encoder.layer.{i}.attention.output.dense.{weight,bias}
    h.{i}.attn.post.0.{weight,bias}       encoder.layer.{i}.attention.output.LayerNorm.{weight,bias}
    h.{i}.ff.psi.weight, .bias            encoder.layer.{i}.intermediate.dense.weight, .bias
    h.{i}.ff2.psi.weight, .bias           encoder.layer.{i}.output.dense.weight, .bias
    h.{i}.y.{weight,bias}                 encoder.layer.{i}.output.LayerNorm.{weight,bias}
    pool.psi.weight, .bias                pooler.dense.weight, .bias
    y.psi.weight, .bias                   classifier.weight, .bias (bert_classifier)
"""

from rpn2c.frontends.weights import Link, WeightMap

_LAYER = "encoder.layer.{i}."


def _both(spec: str, library: str, spec_weight: str = "weight") -> tuple[Link, Link]:
    """A weight and its bias: the spec's ``{spec}.{spec_weight}`` and ``{spec}.bias``."""
    return Link(f"{spec}.{spec_weight}", (f"{library}.weight",)), Link(f"{spec}.bias", (f"{library}.bias",))


_QKV = ("query", "key", "value")
_ENCODER = (
    Link("e.w.weight", ("embeddings.word_embeddings.weight",)),
    Link("e.p.weight", ("embeddings.position_embeddings.weight",)),
    Link("e.t.weight", ("embeddings.token_type_embeddings.weight",)),
    *_both("e.e", "embeddings.LayerNorm"),
    Link("h.{i}.attn.in_proj_weight", tuple(_LAYER + f"attention.self.{p}.weight" for p in _QKV)),
    Link("h.{i}.attn.in_proj_bias", tuple(_LAYER + f"attention.self.{p}.bias" for p in _QKV)),
    *_both("h.{i}.attn.fusion.linear", _LAYER + "attention.output.dense"),
    *_both("h.{i}.attn.post.0", _LAYER + "attention.output.LayerNorm"),
    *_both("h.{i}.ff", _LAYER + "intermediate.dense", "psi.weight"),
    *_both("h.{i}.ff2", _LAYER + "output.dense", "psi.weight"),
    *_both("h.{i}.y", _LAYER + "output.LayerNorm"),
    *_both("pool", "pooler.dense", "psi.weight"),
)


_UNDER_BERT = tuple(Link(link.spec, tuple("bert." + k for k in link.library)) for link in _ENCODER)

MAPS = {
    "bert": WeightMap("bert", _ENCODER),
    "bert_classifier": WeightMap("bert_classifier", _UNDER_BERT + _both("y", "classifier", "psi.weight")),
}
