"""A ψ that reads another node's weight matrix (``psi = tied(emb)``)."""

from __future__ import annotations

import torch

from rpn2c.components.base import PsiModule


class TiedPsi(PsiModule):
    """ψ(w) = W_src (or W_srcᵀ): no tensor of its own; ``bind`` points it at the source's parameter, which it
    reads on every call (so conversions and loads of the source are seen)."""

    def __init__(self, n: int, D: int, transpose: bool):
        super().__init__()
        self.n, self.D, self.transpose = n, D, transpose
        self.__dict__["_source"] = None  # (module, attribute): not a sub-module, so the tensor is listed once

    def bind(self, owner: torch.nn.Module, attr: str) -> None:
        self.__dict__["_source"] = (owner, attr)

    @property
    def weight(self) -> torch.Tensor:
        if self._source is None:
            raise RuntimeError("a tied ψ is used before the model bound it to its source")
        w = getattr(*self._source)
        return w.t() if self.transpose else w

    def matrix(self) -> torch.Tensor:
        return self.weight

    def apply(self, z: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(z, self.weight)

    def extra_repr(self) -> str:
        return f"{self.n} x {self.D}" + (", transposed" if self.transpose else "")
