"""Linear recurrences ``h_t = A h_{t−1} + u_t`` by a log-depth parallel scan, and their literal matrices.

``A`` is a scalar (0-d), a diagonal given as a vector ``[H]`` (``h_t = λ ⊙ h_{t−1} + u_t``) or a dense matrix
``[H, H]``. The scan is Hillis–Steele's inclusive scan on the pairs ``(A, u_t)``: after the round with stride
``s`` every ``h_t`` holds ``Σ_{k<2s} A^k u_{t−k}``, using ``A^s`` from repeated squaring, so ``⌈log₂ T⌉`` rounds
of one batched multiply each. It never divides by ``A`` (the closed form ``λ^t·cumsum(u_j / λ^j)`` overflows for
small ``|λ|``), so any ``λ`` that keeps the outputs finite is exact.

Under ``torch.export`` with a symbolic time length the rounds cannot be a Python loop (its test ``s < T`` would
fix ``T``): both scans then run the same Hillis–Steele rounds inside ``torch.while_loop``, which torch.export keeps
as a loop and ONNX as ``Loop``, so the exported program takes any ``T``.
"""

from __future__ import annotations

import torch


def _times(a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``A v`` on the last axis of ``v``: a matrix product for a dense ``A``, else an elementwise one."""
    return v @ a.transpose(-1, -2) if a.dim() == 2 else v * a


def linear_scan(u: torch.Tensor, a: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """``h_t = A h_{t−1} + u_t`` along dim −2 of ``u [..., T, H]``, ``h_{−1} = h0 [..., H]`` (or 0)."""
    if symbolic(u.shape[-2]):
        return _traced_rounds(u, a, None if h0 is None else _times(a, h0), varying=False)
    if h0 is not None:
        u = torch.cat([(u[..., :1, :] + _times(a, h0).unsqueeze(-2)), u[..., 1:, :]], dim=-2)
    h, power, s, n = u, a, 1, u.shape[-2]
    while s < n:
        h = torch.cat([h[..., :s, :], h[..., s:, :] + _times(power, h[..., :-s, :])], dim=-2)
        power = power @ power if a.dim() == 2 else power * power
        s *= 2
    return h


def symbolic(n) -> bool:
    """Whether a length is a symbol of a ``torch.export`` trace (a Python loop over it would specialise it); the
    export's own flag, as ``rnn_op.exporting`` reads it (older dynamo folds ``is_exporting()`` to True in compile)."""
    return not isinstance(n, int) and exporting()


def exporting() -> bool:
    """Whether ``torch.export`` is tracing: its own flag, as ``rnn_op.exporting`` reads it (older dynamo folds
    ``is_exporting()`` to True in compile)."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return bool(flag) if flag is not None else torch.compiler.is_exporting()


def _traced_rounds(u: torch.Tensor, a: torch.Tensor, start: torch.Tensor | None, varying: bool) -> torch.Tensor:
    """Hillis–Steele's rounds in ``torch.while_loop``, for a symbolic length ``T``: the round with stride ``s``
    adds ``P h_{t−s}`` to every ``h_t`` with ``t ≥ s``, ``P`` the constant ``A^s`` (squared each round) or, per step,
    ``a_t ⊙ … ⊙ a_{t−s+1}`` (``varying``: ``P_t ← P_t ⊙ P_{t−s}``); ``h_{t−s}`` is gathered and the initial
    state's term ``start`` (``A h₀``) added to step 0 by a select, so no shape depends on ``s`` or slices ``T``.
    The loop is the operator itself, every tensor its body reads passed in (the ``torch.while_loop`` function
    would first run the body through dynamo: seconds per loop in an export)."""
    steps = torch.arange(u.shape[-2], device=u.device)
    if start is not None:
        u = _where((steps == 0).unsqueeze(-1), u + start.unsqueeze(-2), u)
    stride = torch.ones((), dtype=torch.long, device=u.device)  # the carries keep their layout: contiguous
    body = _varying_round if varying else _dense_round if a.dim() == 2 else _constant_round
    carried = (stride, u.contiguous(), a.contiguous())
    return torch.ops.higher_order.while_loop(_more, body, carried, (steps, u.shape[-2]))[1]


def _more(s, h, p, steps, n):  # n: the length as an input (its size read off a complex carry has no ONNX form)
    return s < n


def _shifted(h, s, steps):
    """``(h_{t−s}`` (clamped at 0), the steps ``t ≥ s``)."""
    return _steps_at(h, (steps - s).clamp(min=0)), (steps >= s).unsqueeze(-1)


def _constant_round(s, h, p, steps, n):
    prev, keep = _shifted(h, s, steps)
    return s * 2, _where(keep, h + p * prev, h), p * p


def _dense_round(s, h, p, steps, n):
    prev, keep = _shifted(h, s, steps)
    return s * 2, _where(keep, h + prev @ p.transpose(-1, -2), h), p @ p


def _varying_round(s, h, p, steps, n):
    prev, keep = _shifted(h, s, steps)
    p_prev, _ = _shifted(p, s, steps)
    return s * 2, _where(keep, h + p * prev, h), _where(keep, p * p_prev, p)


def _steps_at(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[..., index, :]``; a complex ``x`` is gathered as its real view (ONNX has no complex gather)."""
    if x.is_complex():
        return torch.view_as_complex(torch.view_as_real(x).index_select(-3, index))
    return x.index_select(-2, index)


def _where(keep: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``torch.where(keep, x, y)``; complex ``x``, ``y`` as their real views (ONNX has no complex select)."""
    if x.is_complex():
        return torch.view_as_complex(torch.where(keep.unsqueeze(-1), torch.view_as_real(x), torch.view_as_real(y)))
    return torch.where(keep, x, y)


def transition_powers(a: torch.Tensor, n: int) -> torch.Tensor:
    """``[A^0, A^1, …, A^n]`` stacked (``[n+1, H, H]`` dense, ``[n+1, *a.shape]`` otherwise), by repeated products."""
    one = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device) if a.dim() == 2 else torch.ones_like(a)
    out = [one]
    for _ in range(n):
        out.append(out[-1] @ a if a.dim() == 2 else out[-1] * a)
    return torch.stack(out)


def recurrence_matrix(a: torch.Tensor, n: int, reverse: bool = False) -> torch.Tensor:
    """The block lower-triangular Toeplitz matrix ``L[i, j] = A^{i−j}`` (j ≤ i) of ``h = L u``, ``[n·H, n·H]``
    (``reverse``: block upper-triangular ``A^{j−i}``, the recurrence run from the last step back). A scalar or
    diagonal ``A`` is written as the dense ``a·I`` / ``diag(λ)`` first: this is the literal matrix."""
    if a.dim() < 2:
        a = torch.diag(a.expand(1) if a.dim() == 0 else a)
    hidden = a.shape[-1]
    powers = transition_powers(a, n)  # [n+1, H, H]
    i = torch.arange(n, device=a.device)
    lag = (i[:, None] - i[None, :]) * (-1 if reverse else 1)
    blocks = powers[lag.clamp(min=0)] * (lag >= 0).to(a.dtype)[:, :, None, None]  # [n, n, H, H]
    return blocks.permute(0, 2, 1, 3).reshape(n * hidden, n * hidden)


def varying_scan(u: torch.Tensor, a: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """``h_t = a_t ⊙ h_{t−1} + u_t`` with a per-step diagonal ``a [..., T, S]`` (a selective recurrence), along
    dim −2, ``h_{−1} = h0 [..., S]`` (or 0). The work-efficient odd–even scan on the pairs ``(a_t, u_t)``, composed
    as ``(a, u) ∘ (a′, u′) = (a a′, a u′ + u)``: combine neighbouring pairs, scan the half-length sequence, fill
    in the even steps: ``⌈log₂ T⌉`` levels, O(T) work in all, no division (real or complex)."""
    a = a.expand_as(u) if a.shape != u.shape else a
    if symbolic(u.shape[-2]):
        return _traced_rounds(u, a, None if h0 is None else a[..., 0, :] * h0, varying=True)
    if h0 is not None:
        u = torch.cat([u[..., :1, :] + a[..., :1, :] * h0.unsqueeze(-2), u[..., 1:, :]], dim=-2)
    return _odd_even(u, a)


def _odd_even(u: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    n = u.shape[-2]
    if n == 1:
        return u
    if n % 2:  # pad with the identity pair (a, u) = (1, 0)
        return _odd_even(torch.cat([u, torch.zeros_like(u[..., :1, :])], -2),
                         torch.cat([a, torch.ones_like(a[..., :1, :])], -2))[..., :n, :]
    u2, a2 = u.unflatten(-2, (n // 2, 2)), a.unflatten(-2, (n // 2, 2))
    odd = _odd_even(a2[..., 1, :] * u2[..., 0, :] + u2[..., 1, :], a2[..., 1, :] * a2[..., 0, :])  # h_1, h_3, …
    before = torch.cat([torch.zeros_like(odd[..., :1, :]), odd[..., :-1, :]], -2)  # h_{2k−1} (h_{−1} = 0)
    even = u2[..., 0, :] + a2[..., 0, :] * before
    return torch.stack([even, odd], -2).flatten(-3, -2)


def varying_matrix(a: torch.Tensor) -> torch.Tensor:
    """The literal lower-triangular matrix of ``h = L u`` for ``h_t = a_t ⊙ h_{t−1} + u_t``: ``L[..., t, s, :] =
    a_t ⊙ a_{t−1} ⊙ … ⊙ a_{s+1}`` for ``s ≤ t`` (the diagonal blocks ``diag(L[t, s])`` kept as vectors),
    ``[..., T, T, S]``, built row by row: ``L[t] = a_t ⊙ L[t−1]`` then ``L[t, t] = 1``."""
    n = a.shape[-2]
    one = torch.ones_like(a[..., 0, :]).unsqueeze(-2)
    rows, prev = [], a.new_zeros(*a.shape[:-2], 0, a.shape[-1])
    for t in range(n):
        prev = torch.cat([a[..., t:t + 1, :] * prev, one], dim=-2)  # [..., t+1, S]
        rows.append(torch.cat([prev, a.new_zeros(*a.shape[:-2], n - t - 1, a.shape[-1])], dim=-2))
    return torch.stack(rows, dim=-3)
