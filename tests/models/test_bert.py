"""specs/bert.rpn equals transformers' BertModel and BertForSequenceClassification in float64 (small random
configurations, nothing downloaded), with a 0/1 attention mask that masks some keys of some samples and token
type ids as a second tokens input: the library's weights loaded into the compiled spec by the "bert" and
"bert_classifier" weight maps give its outputs and every parameter's gradient, and the spec's weights loaded into
the library model give the spec's, in both lowerings. BERT has no float32-only piece at float64.

A sample whose mask keeps no key at all is where they part. The spec's keep mask blocks every key and a query
with no key left has a zero attention row (as ``scaled_dot_product_attention`` gives it, and as the library's SDPA
attention has it too); but the head adds its bias after ξ (RPN 2's ``A κ(Z) ψ + b``), so the spec's value bias
b_v still reaches W_o, where the library's, added to the values inside the attention, is zeroed with the row. The
library's eager attention adds ``(1 − m) · finfo.min`` instead, which makes every score equal: such a query reads
the mean of all values. Elsewhere a row sums to 1 and b_v is the same inside or outside."""

from __future__ import annotations

import pytest
import torch

from rpn2c.frontends import weights
from tests.models.peers import assert_library_into_spec, assert_spec_into_library, compiled, randomise

transformers = pytest.importorskip("transformers")
NORMS = ("LayerNorm",)


def _library(classifier: bool = False, attention: str = "sdpa", **over):
    cfg = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               max_position_embeddings=32, type_vocab_size=3, num_labels=3)
    cfg.update(over)
    config = transformers.BertConfig(**cfg, attn_implementation=attention)
    torch.manual_seed(1)
    cls = transformers.BertForSequenceClassification if classifier else transformers.BertModel
    return randomise(cls(config).double().eval(), NORMS), config


def _spec(config, classifier: bool = False, reference: bool = False):
    params = {"vocab": config.vocab_size, "d": config.hidden_size, "heads": config.num_attention_heads,
              "ffn": config.intermediate_size, "layers": config.num_hidden_layers,
              "positions": config.max_position_embeddings, "type_vocab": config.type_vocab_size,
              "pad": config.pad_token_id, "eps": config.layer_norm_eps}
    if classifier:
        params["labels"] = config.num_labels
    return compiled("bert", "bert_classifier" if classifier else "bert", params, reference)


def _inputs(config, batch=4, length=9, seed=0):
    """Ids, token types, and a 0/1 mask that pads the tails of two samples (the second and the last), their ids
    there the padding id 0 (whose embedding row gets no gradient)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, config.vocab_size, (batch, length), generator=g)
    types = torch.randint(0, config.type_vocab_size, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, length - 3:] = 0
    mask[-1, 2:] = 0
    return ids * mask, mask, types


def _run_library(classifier: bool, ids, mask, types):
    def run(model):
        out = model(ids, attention_mask=mask, token_type_ids=types)
        return out.logits if classifier else (out.last_hidden_state, out.pooler_output)
    return run


@pytest.mark.parametrize("classifier", [False, True], ids=["bert", "bert_classifier"])
@pytest.mark.parametrize("reference", [False, True])
def test_library_weights_into_the_spec_give_the_library_model(classifier, reference):
    library, config = _library(classifier)
    name = "bert_classifier" if classifier else "bert"
    spec = _spec(config, classifier, reference)
    ids, mask, types = _inputs(config)
    got = assert_library_into_spec(name, library, spec, config.num_hidden_layers,
                                   _run_library(classifier, ids, mask, types), lambda m: m(ids, mask, types))
    assert len(got) == (1 if classifier else 2)


def test_the_mask_matters():
    """The padded keys are really dropped: unmasking them changes the padded samples and only those."""
    library, config = _library()
    spec = _spec(config)
    spec.load_state_dict(weights.to_spec("bert", library.state_dict(), config.num_hidden_layers))
    ids, mask, types = _inputs(config)
    h, _ = spec(ids, mask, types)
    h_all, _ = spec(ids, torch.ones_like(mask), types)
    changed = (h - h_all).abs().amax(dim=(1, 2)) > 1e-6
    assert changed.tolist() == [False, True, False, True]


def test_spec_weights_into_the_library_give_the_spec():
    library, config = _library(classifier=True)
    spec = randomise(_spec(config, classifier=True), norms=("e.e.", "post.", ".y."))
    ids, mask, types = _inputs(config, batch=3, length=7, seed=1)
    assert_spec_into_library("bert_classifier", spec, library, config.num_hidden_layers,
                             lambda m: m(ids, mask, types), _run_library(True, ids, mask, types))


def test_a_sample_that_masks_every_key_differs_only_by_the_value_bias():
    """Module docstring: on a sample with no key kept the spec equals the library's SDPA attention once the value
    biases are 0, and differs by them otherwise; the library's eager attention (the mean of all values there)
    differs either way. The other samples are equal throughout."""
    ids, mask, types = _inputs(_library()[1], batch=3, length=6)
    mask[2] = 0
    for attention, value_bias, same in (("sdpa", True, False), ("sdpa", False, True), ("eager", False, False)):
        library, config = _library(attention=attention)
        if not value_bias:
            with torch.no_grad():
                for layer in library.encoder.layer:
                    layer.attention.self.value.bias.zero_()
        spec = _spec(config)
        spec.load_state_dict(weights.to_spec("bert", library.state_dict(), config.num_hidden_layers))
        want = library(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        diff = (spec(ids, mask, types)[0] - want).abs().amax(dim=(1, 2))
        assert (diff[:2] <= 1e-12).all()
        assert bool(diff[2] <= 1e-12) == same, (attention, value_bias)
