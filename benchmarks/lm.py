"""The decoder-only language model workloads' pieces: a nanoGPT-style GPT-2, the GPT-2 configuration, the training
loss and the FLOPs of a training step.

``NanoGPT`` is GPT-2 as people write it by hand (Karpathy's nanoGPT): one fused q/k/v ``nn.Linear``,
``F.scaled_dot_product_attention(is_causal=True)``, a tanh-GELU MLP, pre-norm LayerNorms and an LM head tied to
the token embedding. Its parameter names are transformers' ``GPT2LMHeadModel``'s, its ``nn.Linear`` weights the
transposes of GPT-2's ``Conv1D`` ones (:func:`nanogpt_state`).

FLOPs of one training step (forward + backward) over B·T tokens, the count nanoGPT and the PaLM paper use:
``6·N·B·T + 12·L·d·B·T²``, N the parameters without the position embedding (the tied embedding counted once, as
the LM head's matrix product), the second term the attention scores and their weighted sum (2·T·d each per token
and layer forward, twice that backward), causal masking not halved.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # GPT-2's Conv1D layers: weight stored [in, out]


class Block(nn.Module):
    """Pre-norm decoder layer: x + attn(ln_1(x)), then + mlp(ln_2(x))."""

    def __init__(self, d: int, heads: int, ffn: int, eps: float):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.attn = nn.ModuleDict({"c_attn": nn.Linear(d, 3 * d), "c_proj": nn.Linear(d, d)})
        self.mlp = nn.ModuleDict({"c_fc": nn.Linear(d, ffn), "c_proj": nn.Linear(ffn, d)})

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn["c_attn"](self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn["c_proj"](y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp["c_proj"](F.gelu(self.mlp["c_fc"](self.ln_2(x)), approximate="tanh"))


class NanoGPT(nn.Module):
    """GPT-2 (token ids [B, T] -> logits [B, T, vocab]), nanoGPT's way."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, positions: int, ffn: int | None = None,
                 eps: float = 1e-5):
        super().__init__()
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(vocab, d), "wpe": nn.Embedding(positions, d),
            "h": nn.ModuleList(Block(d, heads, ffn or 4 * d, eps) for _ in range(layers)),
            "ln_f": nn.LayerNorm(d, eps=eps)})
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, ids):
        tr = self.transformer
        x = tr.wte(ids) + tr.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in tr.h:
            x = block(x)
        return self.lm_head(tr.ln_f(x))


def nanogpt_state(library_state: dict) -> dict:
    """NanoGPT's state_dict from ``GPT2LMHeadModel``'s: the same names, Conv1D weights transposed, no buffers."""
    out = {}
    for k, v in library_state.items():
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):  # older transformers' causal-mask buffers
            continue
        out[k] = v.t() if k.endswith(".weight") and any(f".{c}." in k for c in CONV1D) else v
    return out


def gpt2_config(s: dict):
    """transformers' ``GPT2Config`` of sizes ``s`` (vocab, d, heads, layers, T), dropout 0, SDPA attention."""
    import transformers

    return transformers.GPT2Config(
        vocab_size=s["vocab"], n_embd=s["d"], n_head=s["heads"], n_layer=s["layers"], n_positions=s["T"],
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")


def next_token_loss(logits: torch.Tensor, inputs: tuple) -> torch.Tensor:
    """Cross-entropy of ``logits`` [B, T, V] against the next token (the ids shifted left, wrapping), in float32."""
    ids = inputs[0]
    return F.cross_entropy(logits.flatten(0, 1).float(), ids.roll(-1, 1).flatten())


def train_flops(s: dict) -> int:
    """``6·N·B·T + 12·L·d·B·T²`` (see the module docstring) for sizes ``s``."""
    d, f, v, L = s["d"], s.get("ffn", 4 * s["d"]), s["vocab"], s["layers"]
    per_layer = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)  # 2 LayerNorms, attn, MLP
    n = v * d + L * per_layer + 2 * d  # + final LayerNorm; position embedding left out
    tokens = s["batch"] * s["T"]
    return 6 * n * tokens + 12 * L * d * tokens * s["T"]
