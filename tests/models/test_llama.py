"""specs/llama.rpn equals transformers' LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM in float64 (small random
configurations, nothing downloaded): the library's weights loaded into the compiled spec by the "llama" ("qwen2",
"qwen3")
weight map give its logits and gradients, and the spec's weights loaded into the library model give the spec's, in
both lowerings."""

from __future__ import annotations

import pytest
import torch

import rpn2c

from rpn2c.frontends import weights
from tests.models.peers import assert_library_into_spec, assert_spec_into_library, compiled, randomise

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _norm_at_input_precision(monkeypatch):
    """transformers' LlamaRMSNorm computes in float32 whatever the input (a float64 model loses precision there,
    about 1e-8); compared in float64, the library's norm runs at the input's precision, its formula unchanged."""
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen2 import modeling_qwen2
    from transformers.models.qwen3 import modeling_qwen3

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", forward)
    monkeypatch.setattr(modeling_qwen2.Qwen2RMSNorm, "forward", forward)
    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", forward)


def _library(tied: bool, **over):
    cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=tied)
    cfg.update(over)
    config = transformers.LlamaConfig(**cfg, attn_implementation="sdpa")  # eager: softmax in float32
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(config).double().eval()
    for p in model.parameters():  # norms away from 1, so a norm weight on the wrong side shows
        if p.dim() == 1:
            torch.nn.init.uniform_(p, 0.5, 1.5)
    return model, config


def _spec(model_name: str, config, reference: bool = False):
    params = {"vocab": config.vocab_size, "d": config.hidden_size, "heads": config.num_attention_heads,
              "kv_heads": config.num_key_value_heads,
              "ffn": config.intermediate_size, "layers": config.num_hidden_layers, "eps": config.rms_norm_eps,
              "theta": config.rope_parameters["rope_theta"]}
    return compiled("llama", model_name, params, reference)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("reference", [False, True])
def test_library_weights_into_the_spec_give_the_library_model(tied, reference):
    library, config = _library(tied)
    name = "llama_tied" if tied else "llama"
    spec = _spec(name, config, reference)
    ids = torch.randint(0, config.vocab_size, (3, 11))
    assert_library_into_spec(name, library, spec, config.num_hidden_layers, lambda m: m(ids).logits, lambda m: m(ids))


def test_spec_weights_into_the_library_give_the_spec():
    library, config = _library(False)
    spec = _spec("llama", config)
    for p in spec.parameters():
        torch.nn.init.normal_(p, std=0.2)
    ids = torch.randint(0, config.vocab_size, (2, 9))
    assert_spec_into_library("llama", spec, library, config.num_hidden_layers, lambda m: m(ids),
                             lambda m: m(ids).logits)


@pytest.mark.parametrize("kv_heads", [1, 4])
def test_another_base_head_width_and_grouping_follow_the_configuration(kv_heads):
    """A configuration's rope_theta, a head width of 16 (8 turned pairs) and multi-query (1) or plain multi-head
    (4) keys and values reach the spec by its parameters."""
    library, config = _library(False, hidden_size=64, num_attention_heads=4, num_key_value_heads=kv_heads,
                               rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    spec = _spec("llama", config)
    spec.load_state_dict(weights.to_spec("llama", library.state_dict(), config.num_hidden_layers))
    ids = torch.randint(0, config.vocab_size, (2, 13))
    torch.testing.assert_close(spec(ids), library(ids).logits, rtol=0, atol=1e-12)


def test_a_state_dict_that_does_not_fit_the_map_is_refused_by_name():
    library, config = _library(False)
    state = dict(library.state_dict())
    state.pop("model.layers.1.mlp.up_proj.weight")
    with pytest.raises(weights.WeightMapError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        weights.to_spec("llama", state, config.num_hidden_layers)
    state = dict(library.state_dict(), extra=torch.zeros(1))
    with pytest.raises(weights.WeightMapError, match="extra"):
        weights.to_spec("llama", state, config.num_hidden_layers)
    with pytest.raises(weights.WeightMapError, match="the maps are"):
        weights.get("lama")


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_a_training_step_runs_fewer_aten_ops_than_the_library(name):
    """Forward, loss and backward of one step (float32, eager): the spec's packed q/k/v GEMM, (Qwen3) one fused
    rms_norm each for the heads' queries and keys, rotary tables built once per layer for q and k, and one SDPA call
    per layer dispatch no more non-view ops than the library's."""
    from tests.op_count import diff, training_step_ops

    library, config = _library(False) if name == "llama" else _qwen(3)
    library = library.float()
    spec = _spec(name, config).float()
    spec.load_state_dict(weights.to_spec(name, library.state_dict(), config.num_hidden_layers))

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return self.inner(ids, use_cache=False).logits

    ids = torch.randint(0, config.vocab_size, (2, 16))
    ours, theirs = training_step_ops(spec, [ids]), training_step_ops(Logits(library), [ids])
    assert sum(ours.values()) <= sum(theirs.values()), diff(ours, theirs)
    assert ours["_scaled_dot_product_flash_attention_for_cpu"] == config.num_hidden_layers


def _qwen(version: int, **over):
    """A random Qwen2 or Qwen3 (head width d / heads, as the spec's; Qwen3 without biases) in float64."""
    cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False)
    cfg.update(over)
    if version == 3:
        cfg.update(head_dim=cfg["hidden_size"] // cfg["num_attention_heads"], attention_bias=False)
    config = getattr(transformers, f"Qwen{version}Config")(**cfg, attn_implementation="sdpa")
    torch.manual_seed(version)
    return randomise(getattr(transformers, f"Qwen{version}ForCausalLM")(config).double().eval(), ("norm",)), config


def _qwen2(**over):
    return _qwen(2, **over)


@pytest.mark.parametrize("reference", [False, True])
def test_qwen2_weights_into_the_spec_give_the_library_model(reference):
    """Qwen2's biases on W_q, W_k (added before the rotation) and W_v, grouped keys and values."""
    library, config = _qwen2()
    attention = library.model.layers[0].self_attn
    assert attention.q_proj.bias is not None and attention.o_proj.bias is None
    spec = _spec("qwen2", config, reference)
    ids = torch.randint(0, config.vocab_size, (3, 11))
    assert_library_into_spec("qwen2", library, spec, config.num_hidden_layers, lambda m: m(ids).logits,
                             lambda m: m(ids), count=19744)


def test_spec_weights_into_qwen2_give_the_spec():
    library, config = _qwen2(hidden_size=48, num_attention_heads=6, num_key_value_heads=1, num_hidden_layers=3,
                            rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    spec = randomise(_spec("qwen2", config), ("pre.", ".n.", "n.weight"))
    ids = torch.randint(0, config.vocab_size, (2, 9))
    assert_spec_into_library("qwen2", spec, library, config.num_hidden_layers, lambda m: m(ids),
                             lambda m: m(ids).logits)


@pytest.mark.parametrize("reference", [False, True])
def test_qwen3_weights_into_the_spec_give_the_library_model(reference):
    """Qwen3's RMSNorm of each head's queries and keys (one q_norm, one k_norm weight per layer, shared by the
    heads) before the rotation, grouped keys and values, no biases: logits and every gradient to 1e-12, and the
    parameter count the checker reports is the library's."""
    library, config = _qwen(3)
    attention = library.model.layers[0].self_attn
    assert attention.q_proj.bias is None and attention.q_norm.weight.shape == (config.head_dim,)
    spec = _spec("qwen3", config, reference)
    ids = torch.randint(0, config.vocab_size, (3, 11))
    assert_library_into_spec("qwen3", library, spec, config.num_hidden_layers, lambda m: m(ids).logits,
                             lambda m: m(ids), count=19648, grad_atol=1e-12)
    graph = rpn2c.check_file("specs/llama.rpn", model="qwen3")
    assert graph.param_count == 19648


@pytest.mark.parametrize("reference", [False, True])
def test_spec_weights_into_qwen3_give_the_spec(reference):
    library, config = _qwen(3, hidden_size=48, num_attention_heads=6, num_key_value_heads=3, num_hidden_layers=3,
                            rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    spec = randomise(_spec("qwen3", config, reference), ("pre.", ".n.", "n.weight", "norm_weight"))
    ids = torch.randint(0, config.vocab_size, (2, 9))
    assert_spec_into_library("qwen3", spec, library, config.num_hidden_layers, lambda m: m(ids),
                             lambda m: m(ids).logits)


def test_the_qk_norm_weights_are_read_by_the_attention():
    """A q_norm or k_norm weight changed in the library changes its logits, and the spec given the same weights
    follows (a norm weight dropped or applied after the rotation would not): the norm's weight scales the queries'
    features before they are turned, which the rotation does not commute with unless the weight is uniform."""
    library, config = _qwen(3)
    spec = _spec("qwen3", config)
    ids = torch.randint(0, config.vocab_size, (2, 7))
    before = library(ids).logits
    with torch.no_grad():
        library.model.layers[1].self_attn.k_norm.weight.copy_(torch.linspace(0.2, 3.0, config.head_dim))
    after = library(ids).logits
    assert (after - before).abs().max() > 1e-3
    spec.load_state_dict(weights.to_spec("qwen3", library.state_dict(), config.num_hidden_layers))
    torch.testing.assert_close(spec(ids), after, rtol=0, atol=1e-12)
