"""``specs/t5_encoder.rpn`` ↔ transformers' ``T5EncoderModel`` (``t5_encoder``: T5 v1.0's ReLU feed-forward,
``feed_forward_proj = "relu"``; ``t5_encoder_gated``: T5 v1.1 / Flan-T5's ``"gated-gelu"``).

    spec                                  transformers
    e.weight                              shared.weight and encoder.embed_tokens.weight (one tensor)
    b.weight                              encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight
    h.{i}.sa.attn.pre.0.weight            encoder.block.{i}.layer.0.layer_norm.weight
    h.{i}.sa.attn.in_proj_weight          encoder.block.{i}.layer.0.SelfAttention.{q,k,v}.weight, row after row
    h.{i}.sa.attn.fusion.linear.weight    encoder.block.{i}.layer.0.SelfAttention.o.weight
    h.{i}.n.weight                        encoder.block.{i}.layer.1.layer_norm.weight
    h.{i}.ff.psi.weight                   encoder.block.{i}.layer.1.DenseReluDense.wi.weight     (t5_encoder)
    h.{i}.{gate,up}.psi.weight            encoder.block.{i}.layer.1.DenseReluDense.wi_{0,1}.weight (gated)
    h.{i}.down.psi.weight                 encoder.block.{i}.layer.1.DenseReluDense.wo.weight
    n.weight                              encoder.final_layer_norm.weight

T5's layers after the first have no ``relative_attention_bias``: they reuse the first layer's ``position_bias``,
as every layer of the spec reads the one value ``b``.
"""

from rpn2c.frontends.weights import Link, WeightMap

_LAYER = "encoder.block.{i}.layer."
_FF = _LAYER + "1.DenseReluDense."
_COMMON = (
    Link("e.weight", ("shared.weight",)),
    Link("e.weight", ("encoder.embed_tokens.weight",)),
    Link("b.weight", ("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",)),
    Link("h.{i}.sa.attn.pre.0.weight", (_LAYER + "0.layer_norm.weight",)),
    Link("h.{i}.sa.attn.in_proj_weight", tuple(_LAYER + f"0.SelfAttention.{p}.weight" for p in "qkv")),
    Link("h.{i}.sa.attn.fusion.linear.weight", (_LAYER + "0.SelfAttention.o.weight",)),
    Link("h.{i}.n.weight", (_LAYER + "1.layer_norm.weight",)),
    Link("h.{i}.down.psi.weight", (_FF + "wo.weight",)),
    Link("n.weight", ("encoder.final_layer_norm.weight",)),
)

MAPS = {
    "t5_encoder": WeightMap("t5_encoder", _COMMON + (Link("h.{i}.ff.psi.weight", (_FF + "wi.weight",)),)),
    "t5_encoder_gated": WeightMap("t5_encoder_gated", _COMMON + (
        Link("h.{i}.gate.psi.weight", (_FF + "wi_0.weight",)),
        Link("h.{i}.up.psi.weight", (_FF + "wi_1.weight",)))),
}
