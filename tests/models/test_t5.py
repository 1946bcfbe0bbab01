"""specs/t5_encoder.rpn equals transformers' T5EncoderModel in float64 (small random configurations, nothing
downloaded), with a padding mask: the library's weights loaded into the compiled spec by the "t5_encoder" weight
map give its last hidden states and every parameter's gradient, and the spec's weights loaded into the library
model give the spec's, in both lowerings; T5 v1.1's gated-GELU feed-forward as "t5_encoder_gated"."""

from __future__ import annotations

import pytest
import torch

from rpn2c.frontends import weights
from tests.models.peers import assert_library_into_spec, assert_spec_into_library, compiled

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _norm_at_input_precision(monkeypatch):
    """transformers' T5LayerNorm takes the variance in float32 whatever the input (a float64 model loses
    precision there, about 1e-8); compared in float64, the library's norm runs at the input's precision, its
    formula unchanged."""
    from transformers.models.t5 import modeling_t5

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))

    monkeypatch.setattr(modeling_t5.T5LayerNorm, "forward", forward)


def _library(gated: bool = False, **over):
    cfg = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
               relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.1,
               layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu" if gated else "relu")
    cfg.update(over)
    # eager: T5's own scores + position_bias + mask, softmax at the input's precision
    config = transformers.T5Config(**cfg, attn_implementation="eager")
    torch.manual_seed(1)
    model = transformers.T5EncoderModel(config).double().eval()
    for p in model.parameters():  # norms away from 1, so a norm weight on the wrong side shows
        if p.dim() == 1:
            torch.nn.init.uniform_(p, 0.5, 1.5)
    return model, config


def _spec(name: str, config, reference: bool = False):
    params = {"vocab": config.vocab_size, "d": config.d_model, "heads": config.num_heads, "d_kv": config.d_kv,
              "ffn": config.d_ff, "layers": config.num_layers, "buckets": config.relative_attention_num_buckets,
              "max_distance": config.relative_attention_max_distance, "eps": config.layer_norm_epsilon}
    return compiled("t5_encoder", name, params, reference)


def _inputs(config, batch: int, length: int, seed: int = 0):
    """Token ids and a keep mask whose samples have 0, 3, 5 … padded positions at the end."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, config.vocab_size, (batch, length), generator=g)
    keep = torch.ones(batch, length, dtype=torch.long)
    for i in range(1, batch):
        keep[i, length - (2 * i + 1):] = 0
    return ids, keep


@pytest.mark.parametrize("gated", [False, True], ids=["relu", "gated_gelu"])
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_library_weights_into_the_spec_give_the_library_model(gated, reference):
    library, config = _library(gated)
    name = "t5_encoder_gated" if gated else "t5_encoder"
    spec = _spec(name, config, reference)
    ids, keep = _inputs(config, 3, 11)
    assert set(library.state_dict()) == {n for n, _ in library.named_parameters(remove_duplicate=False)}
    # each parameter's gradient, the shared bias table's and both names of the shared embedding included
    assert_library_into_spec(name, library, spec, config.num_layers,
                             lambda m: m(input_ids=ids, attention_mask=keep).last_hidden_state,
                             lambda m: m(ids, keep.bool()))


def test_spec_weights_into_the_library_give_the_spec():
    library, config = _library(False)
    spec = _spec("t5_encoder", config)
    for p in spec.parameters():
        torch.nn.init.normal_(p, std=0.3)
    ids, keep = _inputs(config, 2, 9, seed=1)
    assert_spec_into_library("t5_encoder", spec, library, config.num_layers, lambda m: m(ids, keep.bool()),
                             lambda m: m(input_ids=ids, attention_mask=keep).last_hidden_state)


def test_offsets_past_max_distance_and_other_head_widths_follow_the_configuration():
    """A sequence longer than max_distance (the logarithmic buckets and the last, shared one are all read), more
    buckets, d_kv ≠ d / heads and three layers reach the spec by its parameters."""
    library, config = _library(False, d_kv=6, num_heads=3, num_layers=3, relative_attention_num_buckets=12,
                               relative_attention_max_distance=10)
    spec = _spec("t5_encoder", config)
    spec.load_state_dict(weights.to_spec("t5_encoder", library.state_dict(), config.num_layers))
    ids, keep = _inputs(config, 2, 23, seed=2)
    torch.testing.assert_close(spec(ids, keep.bool()),
                               library(input_ids=ids, attention_mask=keep).last_hidden_state, rtol=0, atol=1e-12)
