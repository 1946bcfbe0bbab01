"""Parameter reconciliation ψ: R^l -> R^{n x D} of the compiler's core set."""

from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import nn

from rpn2c.components.base import PsiModule, Reconciliation
from rpn2c.components.registry import HP, register


def _init_weight(shape, fan_in: int) -> nn.Parameter:
    """Kaiming-uniform like nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


@register
class IdentityPsi(Reconciliation):
    """Identity reconciliation ψ(w) = reshape(w) ∈ R^{n x D}; l = n·D."""

    name, family = "identity", "reconciliation"

    def count(self, n, D):
        return n * D

    def build(self, n, D):
        return _Dense(n, D)


class _Dense(PsiModule):
    def __init__(self, n, D):
        super().__init__()
        self.weight = _init_weight((n, D), D)

    def matrix(self):
        return self.weight

    def apply(self, z):
        return torch.nn.functional.linear(z, self.weight)


@register
class Eye(Reconciliation):
    """Constant eye reconciliation ψ = I_{n x D} (no parameters): passes κ's output through."""

    name, family = "eye", "reconciliation"
    aliases = ("constant_eye",)

    def count(self, n, D):
        return 0

    def build(self, n, D):
        return _Eye(n, D)


class _Eye(PsiModule):
    def __init__(self, n, D):
        super().__init__()
        self.n, self.D = n, D
        self.register_buffer("eye", torch.eye(n, D), persistent=False)  # follows .to(dtype/device)

    def matrix(self):
        return self.eye

    def apply(self, z):
        if self.n == self.D:
            return z
        if self.n < self.D:
            return z[..., : self.n]
        return torch.nn.functional.pad(z, (0, self.n - self.D))


@register
class LowRank(Reconciliation):
    """Low-rank reconciliation (LoRR) ψ(w) = A Bᵀ, A ∈ R^{n x r}, B ∈ R^{D x r}; l = r(n + D)."""

    name, family = "lorr", "reconciliation"
    aliases = ("low_rank",)

    class HP(HP):
        r: int = Field(2, ge=1, description="rank")

    def check(self, n, D):
        if self.hp.r > min(n, D):
            return f"rank r = {self.hp.r} exceeds min(n, D) = {min(n, D)}"
        return None

    def count(self, n, D):
        return self.hp.r * (n + D)

    def build(self, n, D):
        return _LowRank(n, D, self.hp.r)


class _LowRank(PsiModule):
    def __init__(self, n, D, r):
        super().__init__()
        self.A = _init_weight((n, r), r)
        self.B = _init_weight((D, r), D)

    def matrix(self):
        return self.A @ self.B.T

    def apply(self, z):
        return (z @ self.B) @ self.A.T


@register
class DuplicatedPadding(Reconciliation):
    """Duplicated padding ψ(w) = 1_{p x q} ⊗ W, W ∈ R^{(n/p) x (D/q)}; l = nD/(pq)."""

    name, family = "duplicated_padding", "reconciliation"

    class HP(HP):
        p: int = Field(2, ge=1)
        q: int = Field(2, ge=1)

    def check(self, n, D):
        if n % self.hp.p or D % self.hp.q:
            return f"n = {n} must be divisible by p = {self.hp.p} and D = {D} by q = {self.hp.q}"
        return None

    def count(self, n, D):
        return (n // self.hp.p) * (D // self.hp.q)

    def build(self, n, D):
        return _DupPad(n, D, self.hp.p, self.hp.q)


class _DupPad(PsiModule):
    def __init__(self, n, D, p, q):
        super().__init__()
        self.p, self.q = p, q
        self.weight = _init_weight((n // p, D // q), D)

    def matrix(self):
        return torch.kron(torch.ones(self.p, self.q, dtype=self.weight.dtype, device=self.weight.device),
                          self.weight)

    def apply(self, z):
        # (1 ⊗ W) z: sum z over its q blocks, multiply by W, repeat the result p times.
        s = z.unflatten(-1, (self.q, -1)).sum(-2)
        return (s @ self.weight.T).repeat(*([1] * (z.dim() - 1)), self.p)
