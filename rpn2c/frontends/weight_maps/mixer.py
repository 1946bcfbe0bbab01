"""``specs/mixer.rpn`` ↔ an MLP-Mixer in timm's ``MlpMixer`` parameter layout (``stem.proj``, ``blocks.{i}.*``,
``norm``, ``head``).

    spec                                   timm
    p.psi.weight                           stem.proj.weight, [d, C, p, p] as [d, C·p·p]
    p.bias                                 stem.proj.bias
    h.{i}.tok.pre.0.{weight,bias}          blocks.{i}.norm1.{weight,bias}
    h.{i}.tok.xi_instance.fab.W            blocks.{i}.mlp_tokens.fc1.weight  (A ∈ R^{T' x T}, row = output item)
    h.{i}.tok.xi_instance.bias             blocks.{i}.mlp_tokens.fc1.bias    (b ∈ R^{T'}, one per output item)
    h.{i}.tok2.xi_instance.{fab.W,bias}    blocks.{i}.mlp_tokens.fc2.{weight,bias}
    h.{i}.ch.pre.0.{weight,bias}           blocks.{i}.norm2.{weight,bias}
    h.{i}.ch.psi.weight, h.{i}.ch.bias     blocks.{i}.mlp_channels.fc1.{weight,bias}
    h.{i}.ch2.psi.weight, h.{i}.ch2.bias   blocks.{i}.mlp_channels.fc2.{weight,bias}
    n.{weight,bias}                        norm.{weight,bias}
    y.psi.weight, y.bias                   head.{weight,bias}

The token-mixing ``Linear(T, T')`` of timm, applied to the transposed sequence, is the spec's affine instance ξ
with the same ``[T', T]`` weight: ``fc(xᵀ)ᵀ = A x + b 1ᵀ``. The stem's reshaping link needs the other side's shapes
(``weights.to_spec("mixer", state, layers, spec.state_dict())``).
"""

from rpn2c.frontends.weights import Link, WeightMap

_BLOCK = "blocks.{i}."


def _pair(spec_weight: str, spec_bias: str, library: str) -> tuple[Link, Link]:
    return Link(spec_weight, (f"{library}.weight",)), Link(spec_bias, (f"{library}.bias",))


MAPS = {
    "mixer": WeightMap("mixer", (
        Link("p.psi.weight", ("stem.proj.weight",), reshape=True),
        Link("p.bias", ("stem.proj.bias",)),
        *_pair("h.{i}.tok.pre.0.weight", "h.{i}.tok.pre.0.bias", _BLOCK + "norm1"),
        *_pair("h.{i}.tok.xi_instance.fab.W", "h.{i}.tok.xi_instance.bias", _BLOCK + "mlp_tokens.fc1"),
        *_pair("h.{i}.tok2.xi_instance.fab.W", "h.{i}.tok2.xi_instance.bias", _BLOCK + "mlp_tokens.fc2"),
        *_pair("h.{i}.ch.pre.0.weight", "h.{i}.ch.pre.0.bias", _BLOCK + "norm2"),
        *_pair("h.{i}.ch.psi.weight", "h.{i}.ch.bias", _BLOCK + "mlp_channels.fc1"),
        *_pair("h.{i}.ch2.psi.weight", "h.{i}.ch2.bias", _BLOCK + "mlp_channels.fc2"),
        *_pair("n.weight", "n.bias", "norm"),
        *_pair("y.psi.weight", "y.bias", "head"),
    )),
}
