"""The ``nn.Module`` implementations of :mod:`rpn2c.components.psi` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.components.impl.base import PsiModule
from rpn2c.functional import reconciliation as R


class _Psi(PsiModule):
    """A functional reconciliation family bound to (n, D, hp): learnable tensors are parameters, frozen ones buffers.

    ``names`` maps functional tensor names to attribute names (``W`` is stored as ``weight``, as in ``nn.Linear``).
    """

    def __init__(self, family: str, n: int, D: int, hp: dict, params: dict[str, torch.Tensor],
                 buffers: dict[str, torch.Tensor] | None = None, names: dict[str, str] | None = None):
        super().__init__()
        self.family, self.n, self.D, self.hp = family, n, D, dict(hp)
        self.spec = R.RECONCILIATIONS[family]
        names = names or {}
        self._attrs: dict[str, str] = {}
        for key, value in params.items():
            attr = names.get(key, key)
            self.register_parameter(attr, nn.Parameter(value))
            self._attrs[key] = attr
        for key, value in (buffers or {}).items():
            attr = names.get(key, key)
            self.register_buffer(attr, value)  # persistent: saved and restored with the model
            self._attrs[key] = attr
        # a parameter-free ψ still follows .to(dtype/device): an empty non-persistent buffer carries both
        self.register_buffer("anchor", torch.zeros(0), persistent=False)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {key: getattr(self, attr) for key, attr in self._attrs.items()}

    def matrix(self) -> torch.Tensor:
        if not self.spec.learnable:
            return self.spec.fabricate(self.tensors(), self.n, self.D, **self.hp, dtype=self.anchor.dtype,
                                       device=self.anchor.device)
        return self.spec.fabricate(self.tensors(), self.n, self.D, **self.hp)

    def apply(self, z: torch.Tensor) -> torch.Tensor:
        return self.spec.apply(z, self.tensors(), self.n, self.D, **self.hp)

    def extra_repr(self) -> str:
        hp = ", ".join(f"{k}={v}" for k, v in self.hp.items())
        return f"{self.family}: {self.n} x {self.D}" + (f", {hp}" if hp else "")
