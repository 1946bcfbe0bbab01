"""``specs/llama.rpn`` ↔ transformers' ``LlamaForCausalLM`` ("llama", "llama_tied") and ``Qwen2ForCausalLM``
("qwen2": the same keys and the query, key and value biases) and ``Qwen3ForCausalLM`` ("qwen3": the same keys and
the per-head query and key norms).

    spec                              transformers
    e.weight                          model.embed_tokens.weight
    h.{i}.attn.pre.0.weight           model.layers.{i}.input_layernorm.weight
    h.{i}.attn.in_proj_weight         model.layers.{i}.self_attn.{q,k,v}_proj.weight, row after row
    h.{i}.attn.fusion.linear.weight   model.layers.{i}.self_attn.o_proj.weight
    h.{i}.n.weight                    model.layers.{i}.post_attention_layernorm.weight
    h.{i}.{gate,up,down}.psi.weight   model.layers.{i}.mlp.{gate,up,down}_proj.weight
    n.weight                          model.norm.weight
    y.psi.weight                      lm_head.weight (llama_tied: the embedding's, one tensor)
    h.{i}.attn.in_proj_bias           model.layers.{i}.self_attn.{q,k,v}_proj.bias, one after another (qwen2)
    h.{i}.attn.{q,k}_norm_weight      model.layers.{i}.self_attn.{q,k}_norm.weight (qwen3)
"""

from rpn2c.frontends.weights import Link, WeightMap

_LAYER = "model.layers.{i}."
_COMMON = (
    Link("e.weight", ("model.embed_tokens.weight",)),
    Link("h.{i}.attn.pre.0.weight", (_LAYER + "input_layernorm.weight",)),
    Link("h.{i}.attn.in_proj_weight", tuple(_LAYER + f"self_attn.{p}_proj.weight" for p in "qkv")),
    Link("h.{i}.attn.fusion.linear.weight", (_LAYER + "self_attn.o_proj.weight",)),
    Link("h.{i}.n.weight", (_LAYER + "post_attention_layernorm.weight",)),
    *(Link(f"h.{{i}}.{p}.psi.weight", (_LAYER + f"mlp.{p}_proj.weight",)) for p in ("gate", "up", "down")),
    Link("n.weight", ("model.norm.weight",)),
)

MAPS = {
    "llama": WeightMap("llama", _COMMON + (Link("y.psi.weight", ("lm_head.weight",)),)),
    "llama_tied": WeightMap("llama_tied", _COMMON + (Link("e.weight", ("lm_head.weight",)),)),
    "qwen2": WeightMap("qwen2", _COMMON + (
        Link("h.{i}.attn.in_proj_bias", tuple(_LAYER + f"self_attn.{p}_proj.bias" for p in "qkv")),
        Link("y.psi.weight", ("lm_head.weight",)))),
    "qwen3": WeightMap("qwen3", _COMMON + tuple(
        Link(f"h.{{i}}.attn.{p}_norm_weight", (_LAYER + f"self_attn.{p}_norm.weight",)) for p in "qk") + (
        Link("y.psi.weight", ("lm_head.weight",)),)),
}
