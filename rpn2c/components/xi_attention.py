"""The bilinear / attention ξ (paper eq 55–56, 181–182): A = softmax((X W_q)(C W_k)ᵀ · scale + masks).

Causal, windowed, attn_mask and key_padding masks are one additive mask (:func:`structure.additive_mask`). The
default lowering attends by the kernel op the optimiser chose (SDPA, SDPA's causal form, FlexAttention's band);
the reference lowering builds the literal matrix; a hybrid ξ takes the entries at its edges (:meth:`entries`).
"""

from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import Field, model_validator

from rpn2c.components.base import Interdependence, ShapeRuleError
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.ir.kernels import ATTEND_ARGS, XI_ARGS, Fallback, Kernel, Predicate
from rpn2c.ir.types import dim_mul, is_head_bias


_LATER = {"hash": "omit_default"}  # added after specs were hashed: left out of the hash at their defaults


class _BilinearHP(HP):
    softmax: bool = Field(True, description="row softmax over keys (scaled-softmax, eq 182)")
    scale: Optional[float] = Field(None, description="logit scale; default 1/sqrt(rank) with softmax (eq 182), 1 "
                                                     "without (the plain bilinear form, eq 55–56, 86)")
    bias: bool = Field(False, description="biases on the query/key projections")
    causal: bool = Field(False, description="item t attends only to items <= t")
    window: Optional[int] = Field(None, ge=0, description="local window: item i attends only to items j with "
                                                          "|i − j| <= window (with causal: i − window <= j <= i)")
    window_scores: Literal["block", "multiply"] = Field(
        "block", description="outside the window (or region): blocked (−inf before the softmax, weight 0), or the "
                             "literal R ⊙ Ψ of seed 002 eq 7 (score 0, still in the softmax)")
    regions: Optional[int] = Field(None, ge=1, json_schema_extra=_LATER,
                                   description="K: the queries and the keys each cut into K contiguous regions "
                                               "(item i of n in region ⌊i·K/n⌋, seed 002 §2.2); with `region = k` only "
                                               "region pair k relates")
    region: Optional[int] = Field(None, ge=0, json_schema_extra=_LATER,
                                  description="k (from 0): query i reads key j only when i is in the k-th of the "
                                              "K query regions and j in the k-th key region, R^{r(k)} of eq 8")
    key_padding: Optional[ValueRef] = Field(None, description="[B, Nc] mask input over context items")
    attn_mask: Optional[ValueRef] = Field(None, description="[Nq, Nc] or [B, Nq, Nc] mask input, or a per-head "
                                                           "bias head_bias[H, Nq, Nc] (relative_bias, alibi): head "
                                                           "h adds slice h to its scores")
    keys: Optional[ValueRef] = Field(None, description="items input the keys are computed from "
                                                      "(default: the head's data, i.e. its context)")
    rotary: Optional[float] = Field(None, gt=1, description="rotary positions with base θ (e.g. 10000): queries "
                                                            "and keys are rotated by their item's position, "
                                                            "⟨R_t W_q x_t, R_s W_k c_s⟩ (RoPE)")
    rotary_dims: Optional[int] = Field(None, ge=2, description="rotate only the leading dims of each query/key "
                                                               "(partial rotary; even; default: all of the rank)")
    rotary_interleaved: bool = Field(False, description="rotate feature pairs (2i, 2i+1) (RoFormer, GPT-J) "
                                                        "instead of (i, i + dims/2) (GPT-NeoX, Llama)")
    qk_norm: Literal["none", "rms"] = Field(
        "none", json_schema_extra=_LATER,
        description="RMSNorm of each query and key over its rank features before the rotary positions, "
                    "q ← q/√(mean(q²) + ε)·γ_q, k ← k/√(mean(k²) + ε)·γ_k (Qwen3, OLMo 2); γ_q, γ_k [rank] are "
                    "shared by the identical heads of a layer")
    qk_norm_eps: float = Field(1e-6, gt=0, json_schema_extra=_LATER,
                               description="ε of qk_norm (unused without it)")
    softmax_upcast: bool = Field(False, json_schema_extra=_LATER,
                                 description="the row softmax in float32 for every input dtype, cast back "
                                             "(x-transformers' Attend: a float64 model too); the weights are formed "
                                             "explicitly, not by an SDPA kernel")
    qk_norm_upcast: bool = Field(False, json_schema_extra=_LATER,
                                 description="qk_norm in float32 for every input dtype, cast back before γ "
                                             "(transformers' Qwen3RMSNorm: a float64 model too)")


    @model_validator(mode="after")
    def _one_region_of_k(self):
        if (self.regions is None) != (self.region is None):
            raise ValueError("'regions' (K) and 'region' (k) are given together: region pair k of K")
        if self.regions is not None and self.region >= self.regions:
            raise ValueError(f"region = {self.region} is not one of the regions 0 … {self.regions - 1}")
        return self


def _check_head_bias(ctx) -> None:
    """A per-head ``attn_mask`` (``head_bias[H, Nq, Nc]``) has one slice per head of the layer (E0349) and the
    queries' and keys' item counts; ``key_padding`` takes none."""
    if is_head_bias(ctx.aux.get("key_padding")):
        raise ShapeRuleError(f"key_padding masks keys over the batch [B, Nc]; {ctx.aux['key_padding']} is a "
                             "per-head bias: give it as attn_mask")
    bias = ctx.aux.get("attn_mask")
    if not is_head_bias(bias):
        return
    h, nq, nc = bias.shape
    if h != ctx.heads:
        raise ShapeRuleError(f"attn_mask {bias} holds one bias per head for heads = {h}, but the layer has "
                             f"heads = {ctx.heads}", code="E0349")
    for what, have, want in (("queries", nq, ctx.query_items), ("keys", nc, ctx.size)):
        if want is not None and str(have) != str(want):
            raise ShapeRuleError(f"attn_mask {bias} is made for {have} {what}, but the attention has {want}")


def _no_input_mask(hp) -> bool:
    return (hp.softmax and hp.attn_mask is None and hp.key_padding is None and hp.regions is None
            and not hp.softmax_upcast)


def _flex_falls_back(m, qq, kk, values, aux) -> bool:
    """SDPA with the band as a mask instead of FlexAttention: see ``FLEX_ATTENTION.fallback``'s text."""
    from rpn2c.functional import flex_op

    return not (flex_op.supported(qq, kk, values) and flex_op.worthwhile(qq.shape[-2], kk.shape[-2], m.hp.window))


# kernel op ``sdpa_causal`` (rule causal_sdpa): SDPA's is_causal, no materialised mask
SDPA_CAUSAL = Kernel("sdpa_causal", ATTEND_ARGS, "attend_causal", Predicate(
    lambda xi: _no_input_mask(xi.hp) and xi.hp.causal and xi.hp.window is None,
    "softmax attention whose only mask is the causal one"))
# kernel op ``flex_attention`` (rule flex_window): FlexAttention's band block mask, SDPA with the band elsewhere
FLEX_ATTENTION = Kernel("flex_attention", ATTEND_ARGS, "attend_window", Predicate(
    lambda xi: _no_input_mask(xi.hp) and xi.hp.window is not None and xi.hp.window_scores == "block",
    "softmax attention whose only mask is a local window of blocked scores (optionally causal)"), Fallback("sdpa_band", Predicate(
        _flex_falls_back, "gradients are needed, the dtype is not float32/float16/bfloat16 (float64), the device "
                          "is neither CPU nor CUDA, FlexAttention cannot be compiled (no C++ toolchain), or the band "
                          "skips fewer than half of the key blocks")))


class _BilinearBase(Interdependence):
    axes = ("instance",)
    kind = "data"
    attention = True
    kernels = (SDPA_CAUSAL, FLEX_ATTENTION)

    def rank(self, ctx) -> int:
        raise NotImplementedError

    def out_size(self, ctx):
        keys = ctx.aux.get("keys")
        if keys is not None and str(keys.items) != str(ctx.size):
            raise ShapeRuleError(f"the keys {keys} must have as many items as the values ({ctx.size})")
        if self.hp.rotary is None and (self.hp.rotary_dims is not None or self.hp.rotary_interleaved):
            raise ShapeRuleError("rotary_dims and rotary_interleaved shape rotary positions: give rotary = θ "
                                 "(e.g. rotary = 10000.0)")
        _check_head_bias(ctx)
        if self.hp.rotary is not None:
            r, dims = self.rank(ctx), self.rotary_dims(ctx)
            if dims % 2 or dims > r:
                raise ShapeRuleError(f"rotary positions turn pairs of the {r} query/key features: rotary_dims "
                                     f"must be even and at most {r}, got {dims}")
        return ctx.size

    def rotary_dims(self, ctx) -> int:
        """How many leading features of each query and key the rotary positions turn."""
        return self.hp.rotary_dims if self.hp.rotary_dims is not None else self.rank(ctx)

    def key_features(self, ctx):
        keys = ctx.aux.get("keys")
        return ctx.context_features if keys is None else keys.features

    def scratch(self, ctx):
        """The projected queries and keys, ``rank`` wide per item."""
        return dim_mul(2 * self.rank(ctx), ctx.size)

    def count(self, ctx):
        r = self.rank(ctx)
        extra = 2 * r if self.hp.bias else 0
        return ctx.query_features * r + self.key_features(ctx) * r + extra + self.norm_count(ctx)

    def norm_count(self, ctx) -> int:
        """The weights γ_q, γ_k of ``qk_norm`` (one ``rank`` wide each), 0 without it."""
        return 2 * self.rank(ctx) if self.hp.qk_norm != "none" else 0

    def build(self, ctx):
        from rpn2c.components.impl.xi_attention import _BilinearXi

        return _BilinearXi(self.hp, ctx.query_features, self.key_features(ctx), self.rank(ctx), ctx.aux,
                           self.rotary_dims(ctx), ctx.head)


@register
class LowRankBilinear(_BilinearBase):
    """Low-rank bilinear ξ: A = softmax((X W_q)(C W_k)ᵀ · scale) with W_q, W_k of rank r (attention, eq 56/181)."""

    name, family = "low_rank_bilinear", "interdependence"
    aliases = ("attention",)
    synonyms = dict.fromkeys(("mha", "multihead_attention", "multi_head_attention", "self_attention",
                              "scaled_dot_product_attention", "sdpa", "dot_product_attention"),
                             "attention(rank = r), with heads = H for several heads")
    example_call = "low_rank_bilinear(rank = 2)"

    class HP(_BilinearHP):
        rank: int = Field(..., ge=1)

    def rank(self, ctx):
        return self.hp.rank


@register
class Bilinear(_BilinearBase):
    """Parameterised bilinear ξ: A = softmax(X W Cᵀ · scale), W ∈ R^{Mq x Mc} (eq 55)."""

    name, family = "bilinear", "interdependence"
    HP = _BilinearHP

    def rank(self, ctx):
        return self.key_features(ctx)

    def count(self, ctx):
        mk = self.key_features(ctx)
        return ctx.query_features * mk + (mk if self.hp.bias else 0) + self.norm_count(ctx)

    def build(self, ctx):
        from rpn2c.components.impl.xi_attention import _BilinearXi

        return _BilinearXi(self.hp, ctx.query_features, self.key_features(ctx), None, ctx.aux,
                           self.rotary_dims(ctx), ctx.head)


class _LinearAttentionHP(HP):
    rank: int = Field(..., ge=1, description="width r of the mapped queries and keys φ(X W_q), φ(C W_k)")
    causal: bool = Field(False, description="item t attends only to items <= t")


# kernel op ``linear_attention`` (rule linear_attention): A z by associativity, never the N x N matrix
LINEAR_ATTENTION = Kernel("linear_attention", XI_ARGS, "associative", Predicate(
    lambda xi: True, "every linear attention: φ(Q)(φ(K)ᵀ z) equals A z for any mask it takes"))


@register
class LinearAttention(Interdependence):
    """Linear attention ξ: A = D⁻¹(φ(X W_q) φ(C W_k)ᵀ ⊙ M), φ = elu + 1, M all ones or causal, D the row sums (Katharopoulos et al. 2020).

    The rows are positive weights summing to 1, as softmax attention's, with the kernel φ(q)·φ(k) in place of
    exp(q·k). Default lowering: kernel op ``linear_attention``, ``φ(Q)(φ(K)ᵀ z)`` over ``φ(Q)(φ(K)ᵀ 1)`` (causal:
    prefix sums over the items), O(N·r·n), never the N x N matrix; the reference lowering builds A.
    """

    name, family = "linear_attention", "interdependence"
    axes = ("instance",)
    kind = "data"
    HP = _LinearAttentionHP
    example_call = "linear_attention(rank = 2)"
    kernels = (LINEAR_ATTENTION,)

    def out_size(self, ctx):
        if self.hp.causal and ctx.query_items is not None and str(ctx.query_items) != str(ctx.size):
            raise ShapeRuleError(f"a causal linear attention reads its own items: {ctx.query_items} queries but "
                                 f"{ctx.size} keys")
        return ctx.size

    def scratch(self, ctx):
        """The mapped queries and keys, ``rank`` wide per item."""
        return dim_mul(2 * self.hp.rank, ctx.size)

    def count(self, ctx):
        return (ctx.query_features + ctx.context_features) * self.hp.rank

    def build(self, ctx):
        from rpn2c.components.impl.xi_attention import _LinearAttentionXi

        return _LinearAttentionXi(self.hp, ctx.query_features, ctx.context_features)

