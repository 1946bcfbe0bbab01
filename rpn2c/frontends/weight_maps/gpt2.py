"""``specs/gpt2.rpn`` ↔ transformers' ``GPT2LMHeadModel``. GPT-2's ``Conv1D`` stores a linear map's weight as
``[in, out]``, the transpose of the spec's (and ``nn.Linear``'s) ``[out, in]``: those links transpose (T).

    spec                              transformers
    w.weight                          transformer.wte.weight (and lm_head.weight: tied, one tensor)
    e.weight                          transformer.wpe.weight
    h.{i}.attn.pre.0.{weight,bias}    transformer.h.{i}.ln_1.{weight,bias}
    h.{i}.attn.in_proj_weight         transformer.h.{i}.attn.c_attn.weight (T; q, k, v packed as the spec's)
    h.{i}.attn.in_proj_bias           transformer.h.{i}.attn.c_attn.bias
    h.{i}.attn.fusion.linear.weight   transformer.h.{i}.attn.c_proj.weight (T)
    h.{i}.attn.fusion.linear.bias     transformer.h.{i}.attn.c_proj.bias
    h.{i}.n.{weight,bias}             transformer.h.{i}.ln_2.{weight,bias}
    h.{i}.fc.psi.weight, .bias        transformer.h.{i}.mlp.c_fc.weight (T), .bias
    h.{i}.proj.psi.weight, .bias      transformer.h.{i}.mlp.c_proj.weight (T), .bias
    n.{weight,bias}                   transformer.ln_f.{weight,bias}
"""

from rpn2c.frontends.weights import Link, WeightMap

_LAYER = "transformer.h.{i}."


def _pair(spec: str, library: str) -> tuple[Link, Link]:
    """A weight and bias pair of the same name on both sides (a LayerNorm)."""
    return tuple(Link(f"{spec}.{p}", (f"{library}.{p}",)) for p in ("weight", "bias"))


def _conv1d(weight: str, bias: str, library: str) -> tuple[Link, Link]:
    """A Conv1D: its weight transposed, its bias as it is."""
    return Link(weight, (f"{library}.weight",), transpose=True), Link(bias, (f"{library}.bias",))


MAPS = {"gpt2": WeightMap("gpt2", (
    Link("w.weight", ("transformer.wte.weight",)),
    Link("w.weight", ("lm_head.weight",)),
    Link("e.weight", ("transformer.wpe.weight",)),
    *_pair("h.{i}.attn.pre.0", _LAYER + "ln_1"),
    *_conv1d("h.{i}.attn.in_proj_weight", "h.{i}.attn.in_proj_bias", _LAYER + "attn.c_attn"),
    *_conv1d("h.{i}.attn.fusion.linear.weight", "h.{i}.attn.fusion.linear.bias", _LAYER + "attn.c_proj"),
    *_pair("h.{i}.n", _LAYER + "ln_2"),
    *_conv1d("h.{i}.fc.psi.weight", "h.{i}.fc.bias", _LAYER + "mlp.c_fc"),
    *_conv1d("h.{i}.proj.psi.weight", "h.{i}.proj.bias", _LAYER + "mlp.c_proj"),
    *_pair("n", "transformer.ln_f"),
))}
