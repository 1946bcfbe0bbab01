"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): the kernelised attention matrix
``A = D⁻¹ (φ(Q) φ(K)ᵀ ⊙ M)``, ``D = diag((φ(Q) φ(K)ᵀ ⊙ M) 1)``, with the positive feature map ``φ(x) = elu(x) + 1``
and ``M`` all ones or, causal, lower-triangular (item t reads items s <= t).

``linear_attention_matrix`` builds ``A`` (``[..., Nq, Nc]``, the paper's literal ξ); ``linear_attention`` computes
``A V`` without it, by associativity: ``φ(Q) (φ(K)ᵀ V)`` over the row sums ``φ(Q) (φ(K)ᵀ 1)``, O(N·r·n) instead of
O(N²·(r + n)); causal, by prefix sums over the items of ``φ(K)_s ⊗ V_s`` and ``φ(K)_s``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def feature_map(x: Tensor) -> Tensor:
    """``φ(x) = elu(x) + 1 = exp(min(x, 0)) + relu(x)`` (> 0, so every row sum is positive); written without
    ``F.elu``, whose backward torch 2.13's AOT tracing cannot replay on these layouts."""
    return torch.exp(torch.clamp(x, max=0)) + torch.relu(x)


def linear_attention_matrix(qf: Tensor, kf: Tensor, causal: bool) -> Tensor:
    """``A = D⁻¹ (qf kfᵀ ⊙ M)`` from mapped queries ``qf [..., Nq, r]`` and keys ``kf [..., Nc, r]``."""
    s = qf @ kf.transpose(-1, -2)
    if causal:
        s = s.tril()
    return s / s.sum(-1, keepdim=True)


def linear_attention(qf: Tensor, kf: Tensor, v: Tensor, causal: bool) -> Tensor:
    """``A v`` for ``A = linear_attention_matrix(qf, kf, causal)`` without ``A``: ``v [..., Nc, n]``."""
    if not causal:
        return (qf @ (kf.transpose(-1, -2) @ v)) / (qf * kf.sum(-2, keepdim=True)).sum(-1, keepdim=True)
    kv = torch.einsum("...sr,...sn->...srn", kf, v).cumsum(-3)  # Σ_{s<=t} φ(k_s) ⊗ v_s, [..., N, r, n]
    num = torch.einsum("...tr,...trn->...tn", qf, kv)
    den = (qf * kf.cumsum(-2)).sum(-1, keepdim=True)  # φ(q_t) · Σ_{s<=t} φ(k_s)
    return num / den
