"""specs/mixer.rpn equals an MLP-Mixer in float64, weights moving both ways by the "mixer" weight map.

The reference is written here from the paper's equations (Tolstikhin et al. 2021, eq 1: per block
``U = X + W2 σ(W1 LN(X)ᵀ)ᵀ`` over the tokens, ``Y = U + W4 σ(W3 LN(U))`` over the channels) with timm's
parameter names and layout (``stem.proj``, ``blocks.{i}.norm1``, ``blocks.{i}.mlp_tokens.fc1/fc2``,
``blocks.{i}.norm2``, ``blocks.{i}.mlp_channels.fc1/fc2``, ``norm``, ``head``), so the map is timm's. timm itself
is not used: it requires torchvision, whose wheels do not load beside the CPU torch the project pins.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import rpn2c
from tests.models.peers import SPECS, assert_library_into_spec, assert_spec_into_library, compiled

SPEC = SPECS / "mixer.rpn"


class _Mlp(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class _Stem(nn.Module):
    def __init__(self, channels: int, d: int, patch: int):
        super().__init__()
        self.proj = nn.Conv2d(channels, d, patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # [B, T, d], patches row-major


class _Block(nn.Module):
    def __init__(self, d: int, tokens: int, token_dim: int, channel_dim: int, eps: float):
        super().__init__()
        self.norm1, self.mlp_tokens = nn.LayerNorm(d, eps=eps), _Mlp(tokens, token_dim)
        self.norm2, self.mlp_channels = nn.LayerNorm(d, eps=eps), _Mlp(d, channel_dim)

    def forward(self, x):
        x = x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.mlp_channels(self.norm2(x))


class MlpMixer(nn.Module):
    def __init__(self, size=16, patch=4, channels=3, d=32, token_dim=8, channel_dim=64, layers=2, classes=10,
                 eps=1e-6):
        super().__init__()
        tokens = (size // patch) ** 2
        self.stem = _Stem(channels, d, patch)
        self.blocks = nn.Sequential(*(_Block(d, tokens, token_dim, channel_dim, eps) for _ in range(layers)))
        self.norm, self.head = nn.LayerNorm(d, eps=eps), nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.stem(x))).mean(1))


CONFIGS = [dict(), dict(size=12, patch=3, channels=2, d=24, token_dim=20, channel_dim=40, layers=3, classes=5)]


def _library(cfg):
    torch.manual_seed(1)
    model = MlpMixer(**cfg).double().eval()
    for name, p in model.named_parameters():  # away from the initial 0/1, so a swapped or lost tensor shows
        if "norm" in name and name.endswith("weight"):
            torch.nn.init.uniform_(p, 0.5, 1.5)
        else:
            torch.nn.init.normal_(p, std=0.2)
    return model


def _spec(cfg, reference: bool = False):
    return compiled("mixer", "mixer", cfg, reference)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "other"])
@pytest.mark.parametrize("reference", [False, True])
def test_library_weights_into_the_spec_give_the_library_model(cfg, reference):
    library, spec = _library(cfg), _spec(cfg, reference)
    size, channels = cfg.get("size", 16), cfg.get("channels", 3)
    x = torch.randn(3, channels, size, size, dtype=torch.float64)
    assert_library_into_spec("mixer", library, spec, cfg.get("layers", 2), lambda m: m(x), grad_atol=1e-12)


def test_spec_weights_into_the_library_give_the_spec():
    cfg = CONFIGS[1]
    library, spec = _library(cfg), _spec(cfg)
    for p in spec.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(2, cfg["channels"], cfg["size"], cfg["size"], dtype=torch.float64)
    assert_spec_into_library("mixer", spec, library, cfg["layers"], lambda m: m(x), lambda m: m(x))


def test_token_mixing_runs_as_its_affine_xi_before_psi():
    """The affine instance ξ does not commute with ψ, so the optimiser never reorders the token-mixing heads."""
    graph = rpn2c.compile_file(SPEC).graph
    mixing = [n for n in graph.nodes() if n.id.split(".")[-1] in ("tok", "tok2")]
    assert len(mixing) == 4
    for node in mixing:
        assert "project_first" not in {d.rule for d in node.decisions}, node.id
