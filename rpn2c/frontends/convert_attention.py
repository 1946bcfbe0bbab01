"""Converters for nn.MultiheadAttention and nn.TransformerEncoderLayer.

Multi-head attention (catalog §5.4; the paper leaves the split unspecified, §8 item 15) becomes ``heads = H`` copies
of one head, fused by ``concat_linear`` (= W_o, b_o). Head h has a low-rank bilinear instance ξ
``softmax((q W_q,h + b_q,h)(k W_k,h + b_k,h)ᵀ / √d_head)`` (rank d_head = E/H), κ identity, ψ = W_v,h and the bias
b_v,h (added after ξ: every row of a softmax sums to 1, so A(VW + b) = AVW + b).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.frontends.kit import Context, Value, lit, register_converter
from rpn2c.frontends.fx_params import CausalMask


def _mask_input(ctx: Context, v, dims: str, what: str) -> Value | None:
    if v is None:
        return None
    if not isinstance(v, Value):
        ctx.fail(f"{what}={type(v).__name__}", "expected a tensor")
    polarity = "block_mask" if v.dtype == torch.bool else "additive_mask"
    return ctx.declare(v, "mask", f"{polarity}[{dims}]")


def _symbol(v: Value, default: str) -> str:
    """The item-count symbol of a sequence value (its input's), ``default`` when it has none."""
    if v.items_from is not None:
        sym = v.items_from[0].item_dims.get(v.items_from[1])
        if isinstance(sym, str):
            return sym
    return default


def _attention(ctx: Context, mha: nn.MultiheadAttention, local: str, name: str, q: Value, key: Value | None,
               value: Value | None, kpm, attn_mask, causal: bool, extra: list[str], comment: list[str],
               pre: list[str] = (), post: list[str] = (), need_weights: bool = False) -> tuple[Value, str]:
    """Emit the attention head for ``mha`` (torch tensors under ``local``); returns (value, name)."""
    if isinstance(attn_mask, CausalMask):  # a causal mask made from sizes in forward
        attn_mask, causal = None, True
    e, h = mha.embed_dim, mha.num_heads
    r = e // h
    if mha.bias_k is not None:
        ctx.fail("add_bias_kv=True", "learned key/value rows appended to the sequence have no RPN 2 form")
    if mha.add_zero_attn:
        ctx.fail("add_zero_attn=True", "an appended zero key/value row has no RPN 2 form")
    bf = mha.batch_first
    ctx.sequence(q, e, "T", bf, "query")
    if key is not None:
        ctx.sequence(key, mha.kdim, "S", bf, "key")
        ctx.sequence(value, mha.vdim, "S", bf, "value")
    t_sym = _symbol(q, "T")
    s_sym = _symbol(key, "S") if key is not None else t_sym
    kpm_v = _mask_input(ctx, kpm, f"B, {s_sym}", "key_padding_mask")
    am_v = None
    if attn_mask is not None:
        if len(attn_mask.shape) == 3:
            if h > 1:
                ctx.fail(f"attn_mask of shape {list(attn_mask.shape)} with num_heads={h}",
                         "a 3-D mask holds one mask per (sample, head); heads = H copies share one mask per sample "
                         "(a 3-D mask works with num_heads=1, a 2-D mask with any)")
            am_v = _mask_input(ctx, attn_mask, f"B, {t_sym}, {s_sym}", "attn_mask")
        else:
            am_v = _mask_input(ctx, attn_mask, f"{t_sym}, {s_sym}", "attn_mask")
    if causal and am_v is not None:
        # torch reads is_causal as a hint about attn_mask (F.multi_head_attention_forward): with no key padding
        # mask and no weights returned it runs SDPA's own causal mask and ignores attn_mask's values; otherwise
        # it applies attn_mask and ignores the hint. The spec does the same (the input stays declared).
        if kpm_v is None and not need_weights:
            am_v.uses += 1  # read by torch as the hint only: not an unused input
            am_v = None
        else:
            causal = False
    has_bias = mha.in_proj_bias is not None
    out_bias = mha.out_proj.bias is not None
    xi = [f"rank = {r}", f"bias = {lit(has_bias)}"]
    if key is not None:
        xi.append(f"keys = {key.name}")
    if kpm_v is not None:
        xi.append(f"key_padding = {kpm_v.name}")
    if am_v is not None:
        xi.append(f"attn_mask = {am_v.name}")
    if causal:
        xi.append("causal = true")
    settings = ([f"heads = {h}"] if h > 1 else []) + [f"xi_instance = attention({', '.join(xi)})", f"out = {r}"]
    if not has_bias:
        settings.append("bias = false")
    settings.append(f"fusion = concat_linear(out = {e}{'' if out_bias else ', bias = false'})")
    settings += extra
    uses = [u for u in (key, kpm_v, am_v) if u is not None]
    y = ctx.head(q, settings, comment=comment, context=value, name=name, uses=uses, pre=pre, post=post,
                 out_kind="items",
                 time_major=not bf)
    y.items_from = q.items_from
    # identical heads are packed as torch packs them (rpn2c/ir/layout.py): the tensors map one to one
    if mha._qkv_same_embed_dim:
        ctx.param(f"{name}.in_proj_weight", f"{local}in_proj_weight")
    else:
        for part in "qkv":
            ctx.param(f"{name}.{part}_proj_weight", f"{local}{part}_proj_weight")
    if has_bias:
        ctx.param(f"{name}.in_proj_bias", f"{local}in_proj_bias")
    ctx.param(f"{name}.fusion.linear.weight", f"{local}out_proj.weight")
    if out_bias:
        ctx.param(f"{name}.fusion.linear.bias", f"{local}out_proj.bias")
    return y, name


def _head_comment(mha: nn.MultiheadAttention, cross: bool) -> list[str]:
    e, h = mha.embed_dim, mha.num_heads
    r = e // h
    data = "the context `value`, keys from `key`" if cross else "the input itself (self-attention)"
    return [f"  {h} head(s) (heads = {h}) fused by concat_linear(out = {e}) = out_proj (W_o, b_o); per head:",
            f"  ξ_instance = low-rank bilinear attention softmax((q W_q + b_q)(k W_k + b_k)ᵀ / √{r}) (rank {r}),",
            f"  data = {data}; κ identity, ψ identity = W_v [{r}, {mha.vdim}], bias b_v added after ξ, π zero"]


def multihead_attention(m: nn.MultiheadAttention, ctx: Context) -> Value:
    """nn.MultiheadAttention(query, key, value) -> attn_output."""
    q, key, value = ctx.get("query"), ctx.get("key"), ctx.get("value")
    causal = bool(ctx.get("is_causal", False))
    masks = []
    if ctx.get("key_padding_mask") is not None:
        masks.append("key_padding_mask -> key_padding (its dtype gives the polarity: bool = True blocks)")
    if ctx.get("attn_mask") is not None:
        masks.append("attn_mask -> attn_mask (bool = True blocks, float = added to the logits)")
    need_weights = bool(ctx.get("need_weights", True))
    if causal:
        masks.append("is_causal=True -> causal = true: a hint that attn_mask is causal; as in torch, SDPA's causal "
                     "mask replaces attn_mask without key_padding_mask and need_weights, else attn_mask alone applies")
    comment = [f"{ctx.where()}(embed_dim={m.embed_dim}, num_heads={m.num_heads}, batch_first={m.batch_first}):",
               *_head_comment(m, True), *[f"  mask: {t}" for t in masks]]
    if m.dropout > 0:
        comment.append(f"  attention dropout p={m.dropout} is identity in eval mode (not represented)")
    y, _ = _attention(ctx, m, "", ctx.name("attn"), q, key, value, ctx.get("key_padding_mask"),
                      ctx.get("attn_mask"), causal, [], comment, need_weights=need_weights)
    return y


def _ffn_activation(m: nn.TransformerEncoderLayer, ctx: Context) -> str:
    act = m.activation
    code = getattr(m, "activation_relu_or_gelu", 0)
    if code == 1 or act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if code == 2 or act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    ctx.fail(f"activation={getattr(act, '__name__', type(act).__name__)}", "only relu and gelu (exact)")


def link_norm(ctx: Context, head: str, norm: str, norm_first: bool) -> None:
    """Link LayerNorm ``norm`` to the head's first pre-processing (pre-norm) or post-processing (post-norm)."""
    slot = "pre" if norm_first else "post"
    ctx.param(f"{head}.{slot}.0.weight", f"{norm}.weight")
    ctx.param(f"{head}.{slot}.0.bias", f"{norm}.bias")


def feed_forward(ctx: Context, m: nn.Module, attn: Value, base: str, act: str, norm: str) -> Value:
    """The feed-forward sub-block of a transformer layer ``m`` on ``attn``: linear1 + act and linear2 as two
    perceptron heads, then the residual add; LayerNorm ``norm`` as the first head's pre-processing (pre-norm,
    ``x + FF(norm(x))``) or after the add (post-norm, ``norm(x + FF(x))``)."""
    e, dff = m.linear1.in_features, m.linear1.out_features
    eps = lit(float(ctx.module.get_submodule(norm).eps))
    shape = attn.shape
    ff1 = ctx.head(attn, [f"out = {dff}"], name=f"{base}_ff", post=[act],
                   pre=[f"layer_norm(eps = {eps})"] if m.norm_first else [],
                   comment=[f"  feed-forward linear1 ({e} -> {dff}) + {act}: a perceptron head (ξ none, κ identity, "
                            "ψ identity, tied bias, π zero)"
                            + (f"; pre = [layer_norm] is {norm}" if m.norm_first else "")],
                   out_shape=(*shape[:-1], dff))
    ff2 = ctx.head(ff1, [f"out = {e}"], name=f"{base}_ff2", out_shape=shape,
                   comment=[f"  feed-forward linear2 ({dff} -> {e}): a perceptron head"])
    ctx.param(f"{ff1.name}.psi.weight", "linear1.weight")
    ctx.param(f"{ff1.name}.bias", "linear1.bias")
    ctx.param(f"{ff2.name}.psi.weight", "linear2.weight")
    ctx.param(f"{ff2.name}.bias", "linear2.bias")
    if m.norm_first:
        ctx.param(f"{ff1.name}.pre.0.weight", f"{norm}.weight")
        ctx.param(f"{ff1.name}.pre.0.bias", f"{norm}.bias")
        return ctx.op("add", [attn, ff2], name=base, shape=shape,
                      comment=f"  the residual (a remainder π = identity): x + FF({norm}(x))")
    s = ctx.op("add", [attn, ff2], name=f"{base}_res", shape=shape,
               comment="  the residual (a remainder π = identity)")
    y = ctx.op("layer_norm", [s], f"eps = {eps}", name=base, shape=shape, comment=f"  {norm} (post-norm)")
    ctx.param(f"{base}.weight", f"{norm}.weight")
    ctx.param(f"{base}.bias", f"{norm}.bias")
    return y


def transformer_encoder_layer(m: nn.TransformerEncoderLayer, ctx: Context) -> Value:
    """nn.TransformerEncoderLayer (post- or pre-norm): an attention head with the identity remainder (residual)
    and LayerNorm as output (post-norm) or input (pre-norm) processing, then two perceptron heads and a residual add."""
    x = ctx.get("src")
    mha = m.self_attn
    act = _ffn_activation(m, ctx)
    if m.linear1.bias is None or m.norm1.bias is None:
        ctx.fail("bias=False", "layer_norm's affine form has both a weight and a bias")
    if not (m.norm1.elementwise_affine and m.norm2.elementwise_affine):
        ctx.fail("LayerNorm(elementwise_affine=False)")
    e, dff = mha.embed_dim, m.linear1.out_features
    causal = bool(ctx.get("is_causal", False))
    base = ctx.name("enc")
    eps1 = lit(float(m.norm1.eps))
    where = (f"{ctx.where()}(d_model={e}, nhead={mha.num_heads}, dim_feedforward={dff}, "
             f"norm_first={m.norm_first}, activation={act})")
    drop = [] if m.dropout.p == 0 and mha.dropout == 0 else ["  dropout is identity in eval mode (not represented)"]
    if not m.norm_first:
        comment = [where, "  self-attention sub-block, post-norm: norm1(x + SA(x)) = one head with",
                   "  π = identity (the residual) and post = [layer_norm] (norm1):", *_head_comment(mha, False), *drop]
        extra, pre, post = ["pi = identity"], [], [f"layer_norm(eps = {eps1})"]
    else:
        comment = [where, "  self-attention sub-block, pre-norm: x + SA(norm1(x)) = one head with",
                   "  pre = [layer_norm] (norm1) and π = identity on the raw input (the residual):",
                   *_head_comment(mha, False), *drop]
        extra, pre, post = ["pi = identity"], [f"layer_norm(eps = {eps1})"], []
    attn, attn_name = _attention(ctx, mha, "self_attn.", f"{base}_attn", x, None, None,
                                 ctx.get("src_key_padding_mask"), ctx.get("src_mask"), causal, extra, comment,
                                 pre, post)
    link_norm(ctx, attn_name, "norm1", m.norm_first)
    y = feed_forward(ctx, m, attn, base, act, "norm2")
    y.items_from = x.items_from
    return y


def transformer_encoder(m: nn.TransformerEncoder, ctx: Context) -> Value:
    """nn.TransformerEncoder = its layers in order (each an nn.TransformerEncoderLayer, converted as above, with the
    encoder's masks), then the optional final norm as layer_norm processing.

    torch's fast path (eval, no grad) runs the same arithmetic, except that with a key-padding mask and nested
    tensors it returns 0 at padded positions; the spec returns the math path's values there (a note says so)."""
    x = ctx.get("src")
    kw = {"src_mask": ctx.get("mask"), "src_key_padding_mask": ctx.get("src_key_padding_mask"),
          "is_causal": bool(ctx.get("is_causal"))}
    if kw["src_key_padding_mask"] is not None and getattr(m, "use_nested_tensor", False):
        ctx.builder.notes.append(f"{ctx.where()}: torch's nested-tensor fast path (eval, no grad) returns 0 at padded "
                                 "positions; this spec returns the values torch computes with gradients enabled")
    for i, layer in enumerate(m.layers):
        x = ctx.child(layer, f"layers.{i}", [x], kw)
    if m.norm is not None:
        x = ctx.child(m.norm, "norm", [x], {})
    return x


def register_all() -> None:
    register_converter(nn.MultiheadAttention, multihead_attention)
    register_converter(nn.TransformerEncoderLayer, transformer_encoder_layer)
    register_converter(nn.TransformerEncoder, transformer_encoder)
