"""Weights shared in torch stay shared in the spec, and tensors a model reads or makes in ``forward`` convert:
each model equals its spec in float64 (outputs, parameter gradients mapped back) with the same number of free
parameters (``assert_matches_torch``), in both lowerings."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import rpn2c
from rpn2c.frontends.torch_import import TorchImportError
from unification_helpers import assert_matches_torch, rand

IDS = torch.tensor([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])


class Albert(nn.Module):
    """One encoder layer applied three times (ALBERT's cross-layer sharing)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        h = self.inp(x)
        for _ in range(3):
            h = self.layer(h)
        return self.out(h)


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.rnn = nn.GRU(8, 8, batch_first=True)
        self.head = nn.Linear(8, 11, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.head(h)


class TiedAutoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 3)
        self.dec_bias = nn.Parameter(torch.randn(6))

    def forward(self, x):
        return F.linear(torch.tanh(self.enc(x)), self.enc.weight.t(), self.dec_bias)


class LayerScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.gamma = nn.Parameter(torch.rand(4, 1, 1))

    def forward(self, x):
        return x + self.gamma * self.conv(x)


class PatchTokens(nn.Module):
    """ViT's front: patch tokens, a class token and learned positions, one encoder layer, the class readout."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.pos = nn.Parameter(torch.randn(1, 5, 8))
        self.enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        t = self.proj(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1) + self.pos
        return self.head(self.enc(t)[:, 0])


class PaddedEncoder(nn.Module):
    """BERT-style: token + position embeddings (positions from torch.arange) and a padding mask from the ids."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(11, 8)
        self.pos = nn.Embedding(16, 8)
        self.enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.out = nn.Linear(8, 2)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return self.out(self.enc(h, src_key_padding_mask=ids.eq(0)).mean(1))


class CausalLM(nn.Module):
    """GPT-style: a causal mask made from the length, positions, an LM head tied to the token embedding."""

    def __init__(self, float_mask: bool = False):
        super().__init__()
        self.float_mask = float_mask
        self.tok = nn.Embedding(11, 8)
        self.pos = nn.Embedding(16, 8)
        self.blk = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True)
        self.lm = nn.Linear(8, 11, bias=False)
        self.lm.weight = self.tok.weight

    def forward(self, ids):
        t = ids.size(1)
        if self.float_mask:
            mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device, dtype=torch.float64)
        else:
            mask = torch.ones(t, t, dtype=torch.bool, device=ids.device).triu(1)
        h = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))[None]
        return self.lm(self.blk(h, src_mask=mask))


class AffineFunctional(nn.Module):
    """F.layer_norm and F.embedding with the model's own tensors."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(11, 6))
        self.w, self.b = nn.Parameter(torch.rand(6) + 0.5), nn.Parameter(torch.randn(6))
        self.fc = nn.Linear(6, 2)

    def forward(self, ids):
        return self.fc(F.layer_norm(F.embedding(ids, self.table), (6,), self.w, self.b))


CASES = {
    "albert": (Albert, lambda: (rand(2, 5, 6),)),
    "tied_lm": (TiedLM, lambda: (IDS,)),
    "tied_autoencoder": (TiedAutoencoder, lambda: (rand(3, 6),)),
    "layer_scale": (LayerScale, lambda: (rand(2, 4, 5, 5),)),
    "patch_tokens": (PatchTokens, lambda: (rand(2, 3, 8, 8),)),
    "padded_encoder": (PaddedEncoder, lambda: (IDS,)),
    "causal_lm": (CausalLM, lambda: (IDS,)),
    "causal_lm_float_mask": (lambda: CausalLM(float_mask=True), lambda: (IDS,)),
    "affine_functional": (AffineFunctional, lambda: (IDS,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_converts_equal_with_the_same_free_parameters(name):
    make, inputs = CASES[name]
    torch.manual_seed(0)
    assert_matches_torch(make(), inputs())


def test_the_spec_writes_the_sharing_and_forward_tensors_visibly():
    torch.manual_seed(0)
    text = rpn2c.from_torch(CausalLM().double(), (IDS,)).text
    assert "psi = tied(tok)" in text and "causal = true" in text and "learned_position(tok, max_len = 16)" in text
    text = rpn2c.from_torch(Albert().double(), (rand(2, 5, 6),)).text
    assert len(re.findall(r"tie = \w*layer_attn\b", text)) == 2  # the second and third call of the layer
    text = rpn2c.from_torch(TiedAutoencoder().double(), (rand(3, 6),)).text
    assert "psi = tied(enc, transpose = true)" in text
    text = rpn2c.from_torch(PaddedEncoder().double(), (IDS,)).text
    assert "token_mask(ids, pad = 0)" in text


def test_tied_gradients_accumulate_in_one_tensor():
    torch.manual_seed(0)
    m = TiedLM().double()
    spec = rpn2c.from_torch(m, (IDS,))
    model = spec.compile()
    assert not any(k.startswith("head.") or ".psi.weight" in k and k.startswith("fc") for k in model.state_dict())
    model(IDS).sum().backward()
    m(IDS).sum().backward()
    (emb,) = [p for n, p in model.named_parameters() if n.endswith("emb.weight")]
    torch.testing.assert_close(emb.grad, m.emb.weight.grad)


class _NotCausal(nn.Module):
    def __init__(self):
        super().__init__()
        self.blk = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x):
        t = x.size(1)
        return self.blk(x, src_mask=torch.ones(t, t, dtype=torch.bool).tril(-2))


class _BatchParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.randn(2, 5, 8))

    def forward(self, x):
        return x + self.p


class _ParamInMatmul(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        return x @ self.p


@pytest.mark.parametrize("module, words", [
    (_NotCausal, "made in forward"),
    (_BatchParam, "sample axis"),
    (_ParamInMatmul, "reads 'p' directly in forward"),
])
def test_what_does_not_convert_is_a_located_refusal(module, words):
    with pytest.raises(TorchImportError) as err:
        rpn2c.from_torch(module().double(), (rand(2, 5, 8),))
    assert words in str(err.value) and err.value.codes == ["E0390"], str(err.value)
