"""The ``nn.Module`` implementations of :mod:`rpn2c.components.base` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn


class _Elementwise(nn.Module):
    """Applies an elementwise κ: flat [..., M] -> [..., M*d] attribute-major; grid [B, C, *S] -> [B, C*d, *S].
    ``kappa`` is the declaration (a ``components.base.Kappa``): its ``basis`` and, if it has one, ``stacked_basis``."""

    def __init__(self, kappa):
        super().__init__()
        self.kappa = kappa
        self.identity = kappa.name == "identity"

    def forward(self, x: torch.Tensor, grid: bool = False) -> torch.Tensor:
        if self.identity:
            return x
        if grid:  # [B, C, d, *S] -> [B, C·d, *S], contiguous (a convolution's layout)
            y = self.kappa.stacked_basis(x, 2)
            if y is not None:  # the degrees computed straight into that layout
                return y.flatten(1, 2)
            return self.kappa.basis(x).movedim(-1, 2).flatten(1, 2).contiguous()  # C = 1 flattens to a view
        return self.kappa.basis(x).flatten(-2)

    def extra_repr(self) -> str:
        return self.kappa.name


class PsiModule(nn.Module):
    """A built reconciliation: ``matrix()`` is ψ(w) in R^{n x D}; ``apply(z)`` is ``z @ ψ(w)ᵀ`` (factored)."""

    def matrix(self) -> torch.Tensor:
        raise NotImplementedError

    def apply(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.matrix().transpose(-1, -2)


class XiModule(nn.Module):
    """A built interdependence function.

    ``matrix(q, c, aux)`` is the literal matrix (reference lowering): ``[M, M']`` / ``[B, M, M']`` for the
    attribute axis, ``[N', N]`` / ``[B, N', N]`` for the instance axis. ``apply(z, q, c, aux)`` computes the same
    product without materialising structural matrices (default lowering). ``q`` is the main (query) input and
    ``c`` the context input, both ``[B, N, M]``; ``z`` is the tensor being transformed.
    """

    axis: str = "instance"
    aux_keys: dict[str, str] = {}  # hyper-parameter -> the value id of the extra input it names (set when built)

    def matrix(self, q, c, aux, size=None) -> torch.Tensor:
        raise NotImplementedError

    def support(self, aux, n, dtype, device):
        """The edge list ``(src, dst, w)`` of the literal matrix where it is a sparse 1-hop adjacency, else None
        (a hybrid ξ's sparse path)."""
        return None

    def entries(self, q, c, aux, dst, src) -> torch.Tensor | None:
        """The matrix's entries ``A[dst, src]`` without building it, or None where only the matrix gives them."""
        return None

    def relation(self, q, c, aux) -> torch.Tensor:
        """The matrix as a value (``relation(x, xi = ...)``'s default form): :meth:`matrix`, unless the ξ computes
        its matrix without a structural one (a bilinear ξ's masks from item indices)."""
        return self.matrix(q, c, aux)

    def offset(self) -> torch.Tensor | None:
        """An affine ξ's learned bias ``b`` (``A z + b 1ᵀ``, one entry per output item or feature), else None."""
        return None

    def apply(self, z, q, c, aux) -> torch.Tensor:
        a = self.matrix(q, c, aux, z.shape[-1] if self.axis == "attribute" else z.shape[-2])
        return z @ a if self.axis == "attribute" else a @ z
