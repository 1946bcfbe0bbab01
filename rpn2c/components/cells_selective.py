"""Selective (input-dependent) and complex linear recurrent cells: ``h_t = a_t ⊙ h_{t−1} + u_t``, ``y_t = R_t(h_t)``.

Seed 003's Table 1 rows that are linear recurrences with a per-step decay (minGRU, Mamba's S6, GLA / HGRN2) and the
LRU's complex diagonal. Each cell maps its layer input ``x [B, T, D]`` to the per-step decay ``a_t`` and drive
``u_t`` over a flat state of width S (:meth:`SelectiveCell.terms`) and reads the output from the states
(:meth:`SelectiveCell.readout`). The default lowering runs ``h`` by the parallel scan
(``functional.scan.varying_scan`` / ``linear_scan``), the reference lowering by the literal lower-triangular matrix
``L[t, s] = a_t ⊙ … ⊙ a_{s+1}`` (``varying_matrix`` / ``recurrence_matrix``). :meth:`SelectiveCell.factors` writes
the layer for one input as ``y_t = Σ_{s≤t} Re(R_t diag(L[t, s]) G_s) x_s + E x_t + b_t``: the matrix view.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from rpn2c.components.cells import Cell
from rpn2c.components.registry import HP, register


class SelectiveCell(Cell):
    """Base of the selective cells: no state weight; ``terms`` gives ``(a, u)``, ``readout`` the output."""

    linear = True  # h_t = A_t h_{t−1} + u_t: linear in the state, so the scan and the matrix apply
    selective: ClassVar[bool] = True
    takes_state: ClassVar[bool] = False  # an initial `state = h0` of width H is the cell's own state
    two_biases: ClassVar[bool] = False  # `bias` is the cell's own (b_Δ, b_α, …), never split in two
    same_width: ClassVar[bool] = False  # the output width equals the input width (channel-wise cells)

    def kernel(self):
        return None

    def state_width(self, hidden: int, d_in: int) -> int:
        return hidden

    def init(self, prefix: str, shape: tuple[int, ...], hidden: int, d_in: int):
        """The initial value of parameter ``prefix`` (default: uniform ±1/√H, torch's RNN init)."""
        import torch

        bound = 1 / math.sqrt(hidden)
        return torch.empty(shape).uniform_(-bound, bound)

    def terms(self, x, w):
        """``(a, u)``: decay ``[B, T, S]`` (or ``[S]`` when time-invariant) and drive ``[B, T, S]``."""
        raise NotImplementedError

    def readout(self, h, x, w):
        """``y [B, T, H]`` from the states ``h [B, T, S]`` and the input ``x``."""
        return h

    def linear_readout(self) -> bool:
        """Whether ``y_t`` is linear in the states (``factors`` writes the layer as a matrix at this input)."""
        return True

    def factors(self, x, w):
        """For one input ``x [T, D]``: ``(a [T, S] or [S], G [T, S, D], g [T, S], R [T, H, S] or None (identity),
        E [H, D] or None, b [H] or None)`` with ``u_t = G_t x_t + g_t`` and ``y_t = Re(R_t h_t) + E x_t + b``."""
        raise NotImplementedError


@register
class MinGRU(SelectiveCell):
    """minGRU: h_t = (1 − z_t) ⊙ h_{t−1} + z_t ⊙ h̃_t, z_t = σ(W_z x_t + b_z), h̃_t = W_h x_t + b_h (Feng et al. 2024).

    The gates depend on x_t only, so the recurrence is linear in h with the per-step decay ``a_t = 1 − z_t``:
    a parallel scan. ``weight_ih`` stacks ``[W_z; W_h]`` ([2H, D]), ``bias_ih`` ``[b_z; b_h]``. Takes an initial
    ``state``.
    """

    name = "mingru"
    gates = 2
    takes_state = True

    def parameter_shapes(self, hidden, d_in, d_state, bias):
        return {"weight_ih": (2 * hidden, d_in)} | ({"bias_ih": (2 * hidden,)} if bias else {})

    def _gates(self, x, w):
        import torch

        g = x @ w["weight_ih"].transpose(0, 1)
        g = g + w["bias_ih"] if "bias_ih" in w else g
        gz, gh = g.chunk(2, dim=-1)
        return torch.sigmoid(gz), gh

    def terms(self, x, w):
        z, cand = self._gates(x, w)
        return 1 - z, z * cand

    def factors(self, x, w):
        z, _ = self._gates(x, w)
        w_h = w["weight_ih"].chunk(2)[1]
        b_h = w["bias_ih"].chunk(2)[1] if "bias_ih" in w else 0 * z[0]
        return 1 - z, z[:, :, None] * w_h, z * b_h, None, None, None


class _MambaHP(HP):
    d_state: int = Field(16, ge=1, description="N: state size per channel (B_t, C_t ∈ R^N)")
    dt_rank: int | None = Field(None, ge=1, json_schema_extra={"hash": "omit_default"},
                                description="R: Δ through rank R and x's projections packed as Mamba's x_proj "
                                            "(none: a full-rank W_Δ and separate W_B, W_C)")


@register
class Mamba(SelectiveCell):
    """Mamba's selective scan S6: h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t, y_t = C_t h_t + D ⊙ x_t, per channel.

    Δ_t = softplus(W_Δ x_t + b_Δ) ∈ R^D, B_t = W_B x_t, C_t = W_C x_t ∈ R^N, A = −exp(A_log) ∈ R^{D×N}; the
    zero-order-hold discretisation of Mamba (Ā = exp(ΔA), B̄ = ΔB). Each of the D input channels has its own N
    states, so ``out`` must equal the input width. ``bias`` is ``b_Δ`` (Mamba's ``dt_proj`` bias); ``W_Δ`` is
    full-rank, or with ``dt_rank = R`` Mamba's own factoring ``W_Δ = W_dt W_x[:R]``: ``weight_x`` ``[R + 2N, D]``
    packs the rows of Δ's low-rank input, ``W_B`` and ``W_C`` (Mamba's ``x_proj``, one GEMM) and ``weight_dt``
    ``[D, R]`` is its ``dt_proj``. Init as Mamba: ``A_log = log(1..N)``, ``D = 1``, ``softplus(b_Δ)``
    log-uniform in [1e-3, 1e-1].
    """

    name = "mamba"
    aliases = ("selective_scan",)
    HP = _MambaHP
    same_width = True
    example_call = "mamba(d_state = 2)"

    @classmethod
    def example_template(cls) -> str:
        return super().example_template().replace("out = 3", "out = 4")

    def state_width(self, hidden, d_in):
        return d_in * self.hp.d_state

    def parameter_shapes(self, hidden, d_in, d_state, bias):
        n, r = self.hp.d_state, self.hp.dt_rank
        if r is not None:
            return ({"A_log": (d_in, n), "weight_x": (r + 2 * n, d_in), "weight_dt": (d_in, r)}
                    | ({"bias_dt": (d_in,)} if bias else {}) | {"D": (d_in,)})
        return ({"A_log": (d_in, n), "weight_dt": (d_in, d_in)} | ({"bias_dt": (d_in,)} if bias else {})
                | {"weight_B": (n, d_in), "weight_C": (n, d_in), "D": (d_in,)})

    def init(self, prefix, shape, hidden, d_in):
        import torch

        if prefix == "A_log":
            return torch.log(torch.arange(1, shape[1] + 1, dtype=torch.float32)).repeat(shape[0], 1)
        if prefix == "D":
            return torch.ones(shape)
        if prefix == "bias_dt":  # softplus⁻¹ of dt log-uniform in [1e-3, 1e-1]
            dt = torch.exp(torch.rand(shape) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            return dt + torch.log(-torch.expm1(-dt))
        return super().init(prefix, shape, hidden, d_in)

    def _selection(self, x, w):
        """``(Δ, B, C)`` of every step: ``[…, T, D]``, ``[…, T, N]``, ``[…, T, N]``."""
        import torch.nn.functional as F

        if "weight_x" in w:  # Mamba's x_proj: one GEMM, then Δ = W_dt (W_x[:R] x)
            n = self.hp.d_state
            low, b, c = (x @ w["weight_x"].transpose(0, 1)).split([self.hp.dt_rank, n, n], dim=-1)
            d = low @ w["weight_dt"].transpose(0, 1)
        else:
            d, b, c = (x @ w[k].transpose(0, 1) for k in ("weight_dt", "weight_B", "weight_C"))
        return F.softplus(d + w["bias_dt"] if "bias_dt" in w else d), b, c

    def terms(self, x, w):
        import torch

        delta, b, _ = self._selection(x, w)  # [B, T, D], [B, T, N]
        a = torch.exp(delta[..., None] * -torch.exp(w["A_log"]))  # [B, T, D, N]
        u = (delta * x)[..., None] * b[..., None, :]
        return a.flatten(-2), u.flatten(-2)

    def readout(self, h, x, w):
        c_rows = w["weight_x"][-self.hp.d_state:] if "weight_x" in w else w["weight_C"]
        c = x @ c_rows.transpose(0, 1)  # [B, T, N]
        return (h.unflatten(-1, (x.shape[-1], -1)) * c[..., None, :]).sum(-1) + w["D"] * x

    def factors(self, x, w):
        import torch

        t, d = x.shape
        n = self.hp.d_state
        a, _ = self.terms(x[None], w)
        delta, b, c = self._selection(x, w)
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        g = (eye[None, :, None, :] * (delta[:, :, None] * b[:, None, :])[..., None]).reshape(t, d * n, d)
        r = (eye[None, :, :, None] * c[:, None, None, :]).reshape(t, d, d * n)
        return a[0], g, x.new_zeros(t, d * n), r, torch.diag(w["D"]), None


class _GLAHP(HP):
    d_key: int = Field(4, ge=1, description="K: key width; the state is a K×H matrix (per head K/h × H/h)")
    tied: bool = Field(False, description="HGRN2: the key is 1 − α_t (no W_k)")
    heads: int = Field(1, ge=1, json_schema_extra={"hash": "omit_default"},
                       description="h: heads, each with its own K/h × H/h state (K and H divisible by h)")
    tau: float = Field(1.0, gt=0, json_schema_extra={"hash": "omit_default"},
                       description="τ: the decay is σ(·)^{1/τ} (GLA uses 16)")
    gate_rank: int | None = Field(None, ge=1, json_schema_extra={"hash": "omit_default"},
                                  description="r: α's pre-activation through rank r, W_α2 W_α1 x_t (GLA uses 16; "
                                              "none: a full W_α)")
    norm: bool = Field(False, json_schema_extra={"hash": "omit_default"},
                       description="LayerNorm of each head's output o_t^h over its H/h values (one learned scale "
                                   "and shift of width H/h for all heads)")

    @model_validator(mode="after")
    def _heads_divide_the_keys(self):
        if self.d_key % self.heads:
            raise ValueError(f"d_key = {self.d_key} must be divisible by heads = {self.heads}")
        return self


@register
class GLA(SelectiveCell):
    """Gated linear attention (GLA; HGRN2 with ``tied``): per head h, S_t = diag(α_t) S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ q_t.

    α_t = σ(W_α x_t + b_α)^{1/τ} (``gate_rank = r``: W_α = W_α2 W_α1 of rank r, GLA's low-rank gate),
    q_t = W_q x_t, k_t = W_k x_t ∈ R^K (``tied``: k_t = 1 − α_t, HGRN2's forget-gate tied input gate),
    v_t = W_v x_t ∈ R^H, each split into ``heads`` blocks (head h has its own K/h × H/h state); ``norm``: each
    head's o_t^h through LayerNorm (GLA's per-head norm), y_t the heads' outputs side by side. GLA's output gate
    and projection, Y = (Swish(X W_r + b_r) ⊙ y) W_O, are heads of the spec (``examples/specs/gla_layer.rpn``).
    The state is scanned with the decay α_t repeated over the head's H/h values.
    """

    name = "gla"
    aliases = ("hgrn2",)
    HP = _GLAHP
    example_call = "gla(d_key = 2)"

    def width_problem(self, hidden, d_in):
        if hidden % self.hp.heads:
            return f"the 'gla' cell splits its {hidden} outputs into heads = {self.hp.heads}: set `out` to a " \
                   f"multiple of {self.hp.heads}"
        return None

    def state_width(self, hidden, d_in):
        return self.hp.d_key * hidden // self.hp.heads

    def linear_readout(self):
        return not self.hp.norm

    def parameter_shapes(self, hidden, d_in, d_state, bias):
        k, r = self.hp.d_key, self.hp.gate_rank
        gate = {"weight_alpha": (k, d_in)} if r is None else {"weight_alpha_down": (r, d_in), "weight_alpha": (k, r)}
        shapes = gate | ({"bias_alpha": (k,)} if bias else {})
        shapes = shapes | {"weight_q": (k, d_in)} | ({} if self.hp.tied else {"weight_k": (k, d_in)}) | {
            "weight_v": (hidden, d_in)}
        return shapes | ({"norm_weight": (hidden // self.hp.heads,), "norm_bias": (hidden // self.hp.heads,)}
                         if self.hp.norm else {})

    def init(self, prefix, shape, hidden, d_in):
        import torch

        if prefix in ("norm_weight", "norm_bias"):
            return torch.ones(shape) if prefix == "norm_weight" else torch.zeros(shape)
        return super().init(prefix, shape, hidden, d_in)

    def _qkv(self, x, w):
        """α, q, k ``[…, T, h, K/h]`` and v ``[…, T, h, H/h]``."""
        import torch
        import torch.nn.functional as F

        z = x @ w["weight_alpha_down"].transpose(0, 1) if "weight_alpha_down" in w else x
        al = z @ w["weight_alpha"].transpose(0, 1)
        al = al + w["bias_alpha"] if "bias_alpha" in w else al
        alpha = torch.sigmoid(al) if self.hp.tau == 1 else torch.exp(F.logsigmoid(al) / self.hp.tau)
        k = 1 - alpha if self.hp.tied else x @ w["weight_k"].transpose(0, 1)
        heads = (self.hp.heads, -1)
        return (alpha.unflatten(-1, heads), (x @ w["weight_q"].transpose(0, 1)).unflatten(-1, heads),
                k.unflatten(-1, heads), (x @ w["weight_v"].transpose(0, 1)).unflatten(-1, heads))

    def terms(self, x, w):
        alpha, _, k, v = self._qkv(x, w)
        a = alpha[..., None].expand(*alpha.shape, v.shape[-1])
        return a.flatten(-3), (k[..., None] * v[..., None, :]).flatten(-3)

    def readout(self, h, x, w):
        import torch.nn.functional as F

        _, q, _, v = self._qkv(x, w)
        o = (h.unflatten(-1, (*q.shape[-2:], v.shape[-1])) * q[..., None]).sum(-2)  # [B, T, h, H/h]
        if self.hp.norm:
            o = F.layer_norm(o, o.shape[-1:], w["norm_weight"], w["norm_bias"])
        return o.flatten(-2)

    def factors(self, x, w):
        import torch

        alpha, q, k, _ = self._qkv(x, w)
        t, h, kh = k.shape
        w_v = w["weight_v"].unflatten(0, (h, -1))  # [h, H/h, D]
        vh = w_v.shape[1]
        a = alpha[..., None].expand(t, h, kh, vh).reshape(t, -1)
        g = (k[:, :, :, None, None] * w_v[None, :, None]).reshape(t, h * kh * vh, -1)
        eye_h = torch.eye(h, dtype=x.dtype, device=x.device)
        eye_v = torch.eye(vh, dtype=x.dtype, device=x.device)
        r = torch.einsum("ij,ab,tjk->tiajkb", eye_h, eye_v, q).reshape(t, h * vh, h * kh * vh)
        return a, g, x.new_zeros(t, h * kh * vh), r, None, None


class _LRUHP(HP):
    d_state: int = Field(16, ge=1, description="N: number of complex states")
    r_min: float = Field(0.5, ge=0, lt=1, description="initial |λ| drawn in the ring [r_min, r_max]")
    r_max: float = Field(0.99, gt=0, lt=1, description="initial |λ| upper radius")
    max_phase: float = Field(2 * math.pi, gt=0, description="initial arg λ drawn in [0, max_phase]")
    gamma: Literal["computed", "learned"] = Field(
        "computed", json_schema_extra={"hash": "omit_default"},
        description="γ = sqrt(1 − |λ|²) from λ, or a learned γ = exp(γ_log) initialised there (the paper's code)")


@register
class LRU(SelectiveCell):
    """Linear recurrent unit: h_t = λ ⊙ h_{t−1} + γ ⊙ (B x_t), y_t = Re(C h_t) + D x_t, λ = exp(−exp(ν) + i·exp(θ)).

    Complex diagonal λ ∈ C^N (|λ| < 1 for every ν), normalisation γ = sqrt(1 − |λ|²) computed from λ (Orvieto et
    al. 2023, eq. 7) or, ``gamma = "learned"``, γ = exp(γ_log) with γ_log a parameter initialised to
    log sqrt(1 − |λ|²) (the paper's implementation), B ∈ C^{N×D} and C ∈ C^{H×N} stored as real and imaginary parts (``B_re``, ``B_im``, ``C_re``,
    ``C_im``), D ∈ R^{H×D}; ``bias`` adds b ∈ R^H to y. Time-invariant: the default lowering scans with torch's
    complex dtypes, the reference lowering builds the complex block lower-triangular matrix of blocks λ^{i−j}.
    Init: the paper's ring init for ν, θ; B ~ N(0, 1/(2D)), C ~ N(0, 1/N) per part.
    """

    name = "lru"
    HP = _LRUHP
    example_call = "lru(d_state = 2)"

    def state_width(self, hidden, d_in):
        return self.hp.d_state

    def parameter_shapes(self, hidden, d_in, d_state, bias):
        n = self.hp.d_state
        learned = {"gamma_log": (n,)} if self.hp.gamma == "learned" else {}
        return ({"nu_log": (n,), "theta_log": (n,)} | learned | {"B_re": (n, d_in), "B_im": (n, d_in), "C_re": (hidden, n),
                 "C_im": (hidden, n), "D": (hidden, d_in)} | ({"bias": (hidden,)} if bias else {}))

    def init(self, prefix, shape, hidden, d_in):
        import torch

        hp = self.hp
        if prefix == "nu_log":
            r2 = torch.rand(shape) * (hp.r_max ** 2 - hp.r_min ** 2) + hp.r_min ** 2
            self._r2 = r2  # the learned γ starts at sqrt(1 − |λ|²) of this draw (its parameter comes next)
            return torch.log(-0.5 * torch.log(r2))
        if prefix == "gamma_log":
            return 0.5 * torch.log(1 - self._r2)
        if prefix == "theta_log":
            return torch.log(hp.max_phase * torch.rand(shape).clamp(min=1e-4))
        if prefix in ("B_re", "B_im"):
            return torch.randn(shape) / math.sqrt(2 * d_in)
        if prefix in ("C_re", "C_im"):
            return torch.randn(shape) / math.sqrt(shape[1])
        return super().init(prefix, shape, hidden, d_in)

    @staticmethod
    def eigenvalues(w):
        """``(λ, γ)``: ``λ = exp(−exp(ν) + i·exp(θ))`` (complex) and ``γ = sqrt(1 − |λ|²)`` (or ``exp(γ_log)``,
        learned)."""
        import torch

        radius, phase = torch.exp(-torch.exp(w["nu_log"])), torch.exp(w["theta_log"])  # |λ|, arg λ: real maths,
        lam = torch.complex(radius * torch.cos(phase), radius * torch.sin(phase))  # which ONNX can also run
        return lam, torch.exp(w["gamma_log"]) if "gamma_log" in w else torch.sqrt(1 - radius ** 2)

    def terms(self, x, w):
        import torch

        lam, gamma = self.eigenvalues(w)
        b = torch.complex(w["B_re"], w["B_im"]) * gamma[:, None]
        return lam, x.to(b.dtype) @ b.transpose(0, 1)

    def readout(self, h, x, w):
        import torch

        c = torch.complex(w["C_re"], w["C_im"])
        y = (h @ c.transpose(0, 1)).real + x @ w["D"].transpose(0, 1)
        return y + w["bias"] if "bias" in w else y

    def factors(self, x, w):
        import torch

        lam, gamma = self.eigenvalues(w)
        t = x.shape[0]
        b = torch.complex(w["B_re"], w["B_im"]) * gamma[:, None]
        c = torch.complex(w["C_re"], w["C_im"])
        return (lam, b.expand(t, *b.shape), b.new_zeros(t, b.shape[0]), c.expand(t, *c.shape), w["D"],
                w.get("bias"))
