"""The paper's §10 diagnostics of a layer's interdependence matrices: rank(A), ‖A‖∞, ‖AX‖₂→∞ and the
generalisation bounds built from them (eq 189–193), computed from the literal matrices of the reference lowering.

Orientation: §10 applies A to the items, ``A X`` with ``X ∈ R^{n x d}`` (row = output). An instance ξ is stored that
way; an attribute ξ ``X A`` (and a grid patch matrix) is the same with ``Aᵀ`` acting on ``Xᵀ``, so every quantity
below is of ``op = A`` (instance) or ``op = Aᵀ`` (attribute) on ``data = X`` or ``Xᵀ``.

- ``‖op‖∞ = max_i Σ_j |op_ij|`` (largest absolute row sum);
- ``‖op X‖₂→∞ = sup_{‖z‖₂=1} ‖op X z‖∞ = max_i ‖(op X)_{i,:}‖₂`` (the definition, used in eq 191); eq 193 writes it
  as the largest *column* norm ``max_j ‖(op X)_{:,j}‖₂``, for which its relaxation ``≤ ‖op‖₂ max_j ‖X_{:,j}‖₂``
  holds: both are reported (docs/semantics.md, "§10 diagnostics");
- VC (eq 189): ``min{d_in, rank(A), d_out}``; n and d are always X's items and features; eq 190 with ``m`` labelled
  of ``n`` instances and confidence ``δ``: ``√(8/m (min{rank A, d_{K−1}} ln(em) + ln(4/δ)))`` with the paper's
  ``d_{K−1}``, the layer's input width ``d_in`` for one layer (``vc_bound``); the output-width reading
  ``min{rank A, d_out}`` is kept beside it (``vc_bound_out``, docs/semantics.md);
- Rademacher (eq 191) for one layer (K = 1): ``c1 n²/(m(n−m)) + c3 c2 ‖A‖∞ ‖AX‖₂→∞ √log n`` with ``c1 = 2Lβ``,
  ``c2 = 2Lω``, ``c3 = Lω√(2/d)``, ``ω = max |Ψ|`` and ``β = ‖b‖₁`` of the head, ``L`` the activation's Lipschitz
  constant; eq 192 adds ``c4 n√min(m, n−m)/(m(n−m)) + c5 √(n/(m(n−m)) ln(1/δ))`` at the paper's ``c4 = 5.05``,
  ``c5 = 0.8``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

C4, C5 = 5.05, 0.8  # the paper's bounds on the constants of eq 192


@dataclass(frozen=True)
class Bounds:
    """§10's quantities of one interdependence matrix (see the module docstring)."""

    title: str
    shape: tuple[int, int]
    rank: int
    norm_inf: float
    norm_2: float
    ax_2_inf: float  # max row norm of op X (the definition)
    ax_cols: float  # max column norm of op X (eq 193's reading)
    ax_cols_bound: float  # ‖op‖₂ max_j ‖X_:,j‖₂ (eq 193's relaxation)
    vc: int
    vc_bound: float  # eq 190 as printed: min{rank A, d_{K−1}} with d_{K−1} = d_in for one layer
    vc_bound_out: float  # eq 190 read with the layer's output width d_out
    rademacher: float
    generalisation: float
    n: int
    m: int
    d_in: int
    d_out: int
    omega: float
    beta: float

    def lines(self) -> list[str]:
        return [
            f"{self.title}: {self.shape[0]}×{self.shape[1]}",
            f"  rank(A) = {self.rank}   ‖A‖∞ = {self.norm_inf:.6g}   ‖A‖₂ = {self.norm_2:.6g}",
            f"  ‖AX‖₂→∞ = max_i ‖(AX)_i,:‖₂ = {self.ax_2_inf:.6g}",
            f"  eq 193: max_j ‖(AX)_:,j‖₂ = {self.ax_cols:.6g} ≤ ‖A‖₂·max_j ‖X_:,j‖₂ = {self.ax_cols_bound:.6g}",
            f"  VC (eq 189): min{{d_in = {self.d_in}, rank(A) = {self.rank}, d_out = {self.d_out}}} = {self.vc}",
            f"  eq 190 (m = {self.m}, δ): √(8/m·(min{{rank A, d_K−1 = {self.d_in}}}·ln(e·m) + ln(4/δ))) = "
            f"{self.vc_bound:.6g}   (with d_out: {self.vc_bound_out:.6g})",
            f"  eq 191 (K = 1, ω = {self.omega:.4g}, β = {self.beta:.4g}, n = {self.n}, m = {self.m}): "
            f"R ≤ {self.rademacher:.6g}",
            f"  eq 192: L_exp − L_em ≤ {self.generalisation:.6g}",
        ]

    def summary(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def matrix_bounds(a: torch.Tensor, x: torch.Tensor, *, title: str = "A", d_out: int, labelled: int | None = None,
                  delta: float = 0.05, lipschitz: float = 1.0, omega: float = 1.0, beta: float = 0.0,
                  instances: int | None = None, features: int | None = None) -> Bounds:
    """§10's quantities of ``op = a`` applied to ``x`` (``[n', n]`` and ``[n, d]``, float64); ``instances`` and
    ``features`` (the n and d of eq 189–192) default to ``x``'s rows and columns (an attribute ξ passes X's)."""
    a, x = a.to(torch.float64), x.to(torch.float64)
    if a.shape[-1] != x.shape[0]:
        raise ValueError(f"A is {tuple(a.shape)} but X has {x.shape[0]} rows")
    n = instances if instances is not None else x.shape[0]
    d_in = features if features is not None else x.shape[1]
    m = labelled if labelled is not None else max(n // 2, 1)
    if not 1 <= m < max(n, 2):
        raise ValueError(f"the labelled count m must satisfy 1 <= m < n = {n}, got {m}")
    if not 0 < delta < 1:
        raise ValueError(f"δ must lie in (0, 1), got {delta}")
    rank = int(torch.linalg.matrix_rank(a)) if a.numel() else 0
    norm_inf = float(a.abs().sum(-1).max()) if a.numel() else 0.0
    norm_2 = float(torch.linalg.matrix_norm(a, ord=2)) if a.numel() else 0.0
    ax = a @ x
    ax_rows = float(ax.norm(dim=-1).max()) if ax.numel() else 0.0
    ax_cols = float(ax.norm(dim=-2).max()) if ax.numel() else 0.0
    x_cols = float(x.norm(dim=-2).max()) if x.numel() else 0.0
    vc = min(d_in, rank, d_out)
    def eq190(width: int) -> float:
        return math.sqrt(8 / m * (min(rank, width) * math.log(math.e * m) + math.log(4 / delta)))

    vc_bound, vc_bound_out = eq190(d_in), eq190(d_out)  # d_{K−1} = d_in for one layer (K = 1)
    big_n = max(n, m + 1)  # eq 191 needs n > m
    c1, c2, c3 = 2 * lipschitz * beta, 2 * lipschitz * omega, lipschitz * omega * math.sqrt(2 / d_in)
    rademacher = (c1 * big_n ** 2 / (m * (big_n - m))
                  + c3 * c2 * norm_inf * ax_rows * math.sqrt(math.log(big_n)))
    general = (rademacher + C4 * big_n * math.sqrt(min(m, big_n - m)) / (m * (big_n - m))
               + C5 * math.sqrt(big_n / (m * (big_n - m)) * math.log(1 / delta)))
    return Bounds(title, (int(a.shape[0]), int(a.shape[1])), rank, norm_inf, norm_2, ax_rows, ax_cols,
                  norm_2 * x_cols, vc, vc_bound, vc_bound_out, rademacher, general, n, m, d_in, d_out, omega, beta)


def layer_bounds(model, layer: str, inputs: dict, *, labelled: int | None = None, delta: float = 0.05,
                 lipschitz: float = 1.0) -> list[Bounds]:
    """§10's quantities of every ξ matrix of ``layer`` in a reference-lowered float64 ``model`` on ``inputs``
    (sample 0, eval mode), with ω and β from the head's ψ and bias."""
    from torch import nn

    from rpn2c.train.interdependence import eval_mode, layer_call, layer_matrices, layer_module

    mats = layer_matrices(model, layer, inputs)
    module = layer_module(model, layer)
    args, _ = layer_call(model, module, inputs)
    if not hasattr(module, "pre"):  # a recurrent layer: its state chain acts on the steps of its input
        data, holders = args[0][0], {}
    else:
        x, context = (list(args) + [None])[:2]
        with eval_mode(model), torch.no_grad():  # the layer's input processing as the pass ran it (no dropout)
            for p in module.pre:
                x = p(x)
        data = (context if context is not None else x)[0]
        holders = {"h": module} if not hasattr(module, "heads") else dict(module.heads.items())
    out = []
    for mat in mats:
        hd = holders.get(mat.head)
        omega, beta, d_out = 1.0, 0.0, data.shape[-1]
        if hd is not None:
            psi = hd.psi if isinstance(getattr(hd, "psi", None), nn.Module) else None
            if psi is not None:
                mods = list(psi) if isinstance(psi, nn.ModuleList) else [psi]
                ws = [m.matrix().detach() for m in mods]
                omega = max(float(w.abs().max()) for w in ws)
                d_out = ws[0].shape[0]
            if getattr(hd, "bias", None) is not None:
                beta = float(hd.bias.detach().abs().sum())
        xx = data.detach().to(torch.float64)
        if xx.dim() == 1:  # a vector view: one item
            xx = xx[None, :]
        elif xx.dim() > 2:  # a grid [C, *S]: the cells are the rows of X
            xx = xx.flatten(1).T
        a = mat.matrix
        instance = "instance" in mat.slot or mat.slot == "state chain"
        op, xd = (a, xx) if instance else (a.T, xx.T)
        if op.shape[-1] != xd.shape[0]:  # a posterior ξ acts on κ's output, not on X: its operator alone
            xd = torch.eye(op.shape[-1], dtype=torch.float64)
        title = f"{layer}: {mat.title}" + ("" if instance else " (Aᵀ acting on Xᵀ)")
        out.append(matrix_bounds(op, xd, title=title, d_out=d_out, labelled=labelled, delta=delta,
                                 lipschitz=lipschitz, omega=omega, beta=beta, instances=xx.shape[0],
                                 features=xx.shape[1]))
    return out
