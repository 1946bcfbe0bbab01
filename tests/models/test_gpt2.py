"""specs/gpt2.rpn equals transformers' GPT2LMHeadModel in float64 (small random configurations, nothing
downloaded): the library's weights loaded into the compiled spec by the "gpt2" weight map (each Conv1D weight
transposed, the LM head tied to the token embedding) give its logits and every parameter's gradient, and the
spec's weights loaded into the library model give the spec's, in both lowerings. GPT-2 has no float32-only piece:
its tanh GELU, LayerNorm and attention all run at the input's precision."""

from __future__ import annotations

import pytest
import torch

from rpn2c.frontends import weights
from tests.models.peers import assert_library_into_spec, assert_spec_into_library, compiled, randomise

transformers = pytest.importorskip("transformers")


def _library(attention: str = "sdpa", **over):
    cfg = dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=32, bos_token_id=0, eos_token_id=0)
    cfg.update(over)
    config = transformers.GPT2Config(**cfg, attn_implementation=attention)
    torch.manual_seed(1)
    return randomise(transformers.GPT2LMHeadModel(config).double().eval(), norms=("ln_",)), config


def _spec(config, reference: bool = False):
    params = {"vocab": config.vocab_size, "d": config.n_embd, "heads": config.n_head,
              "ffn": config.n_inner or 4 * config.n_embd, "layers": config.n_layer,
              "positions": config.n_positions, "eps": config.layer_norm_epsilon}
    return compiled("gpt2", "gpt2", params, reference)


@pytest.mark.parametrize("reference", [False, True])
def test_library_weights_into_the_spec_give_the_library_model(reference):
    library, config = _library()
    spec = _spec(config, reference)
    ids = torch.randint(0, config.vocab_size, (3, 11))
    assert_library_into_spec("gpt2", library, spec, config.n_layer, lambda m: m(ids).logits, lambda m: m(ids),
                             count=28544)


def test_spec_weights_into_the_library_give_the_spec():
    library, config = _library()
    spec = randomise(_spec(config), norms=("pre.", ".n."))
    ids = torch.randint(0, config.vocab_size, (2, 9))
    assert_spec_into_library("gpt2", spec, library, config.n_layer, lambda m: m(ids), lambda m: m(ids).logits)
    assert library.lm_head.weight is library.transformer.wte.weight  # still one tensor


def test_the_eager_attention_and_another_width_agree_too():
    """The library's eager attention (its softmax at the input's precision for GPT-2), an inner width other than
    4·d and a sequence as long as the learned positions."""
    library, config = _library("eager", n_embd=48, n_head=6, n_inner=80, n_layer=1, n_positions=12)
    spec = _spec(config)
    spec.load_state_dict(weights.to_spec("gpt2", library.state_dict(), config.n_layer))
    ids = torch.randint(0, config.vocab_size, (2, 12))
    torch.testing.assert_close(spec(ids), library(ids).logits, rtol=0, atol=1e-12)


def test_a_conv1d_weight_in_the_linear_layout_is_refused_by_its_shape():
    """Conv1D's [in, out] is transposed by the map: a c_fc weight given as nn.Linear stores it ([out, in]) reaches
    the spec transposed back, so loading it fails on its shape rather than computing something else."""
    library, config = _library()
    state = dict(library.state_dict())
    state["transformer.h.0.mlp.c_fc.weight"] = state["transformer.h.0.mlp.c_fc.weight"].t()
    with pytest.raises(RuntimeError, match=r"h\.0\.fc\.psi\.weight"):
        _spec(config).load_state_dict(weights.to_spec("gpt2", state, config.n_layer))
