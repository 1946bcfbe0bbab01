"""Converters for nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer.

A decoder layer is three sub-blocks, each one RPN 2 head or two with the identity remainder π (the residual):

* self-attention over the target (``tgt_mask`` / ``tgt_is_causal``: a mask input or ``causal = true``),
* cross-attention: heads whose queries are the target and whose data (the ``context``) and keys are ``memory``
  (the attention ξ of nn.MultiheadAttention with different query and key inputs),
* the feed-forward pair of perceptron heads and the residual add,

with LayerNorm as output processing (post-norm, ``norm(x + f(x))``) or as the query's input processing (pre-norm,
``x + f(norm(x))``; the context is not normalised, as in torch). nn.Transformer is its encoder stack on ``src``
(nn.TransformerEncoder's converter) followed by its decoder stack on ``tgt`` with the encoder's output as memory.
"""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.frontends.convert_attention import _attention, _ffn_activation, _head_comment, feed_forward, link_norm
from rpn2c.frontends.kit import (
    Context, RecordedCall, Value, find_converter, lit, register_converter,
)


def _sub(ctx: Context, module: nn.Module, local: str, args: list, kwargs: dict, shape) -> Value:
    """``ctx.child`` with the child's own output shape (a decoder's output is the target's shape, an encoder's the
    source's)."""
    path = f"{ctx.path}.{local}" if ctx.path else local
    call = RecordedCall((), {}, torch.empty(tuple(shape), device="meta"))
    base = f"{ctx._base}_{local}" if ctx._base else local
    return find_converter(module)(module, Context(ctx.builder, module, path, args, kwargs, call, base))


def transformer_decoder_layer(m: nn.TransformerDecoderLayer, ctx: Context) -> Value:
    """nn.TransformerDecoderLayer(tgt, memory, ...): self-attention head, cross-attention head (context = memory),
    feed-forward heads; LayerNorm as post- (norm_first=False) or pre-processing (norm_first=True)."""
    x, memory = ctx.get("tgt"), ctx.get("memory")
    if not isinstance(memory, Value):
        ctx.fail(f"memory={type(memory).__name__}", "expected the encoder's output, a tensor")
    act = _ffn_activation(m, ctx)
    norms = (m.norm1, m.norm2, m.norm3)
    if m.linear1.bias is None or any(n.bias is None for n in norms if n.elementwise_affine):
        ctx.fail("bias=False", "layer_norm's affine form has both a weight and a bias")
    if not all(n.elementwise_affine for n in norms):
        ctx.fail("LayerNorm(elementwise_affine=False)")
    sa, ca = m.self_attn, m.multihead_attn
    base = ctx.name("dec")
    where = (f"{ctx.where()}(d_model={sa.embed_dim}, nhead={sa.num_heads}, dim_feedforward={m.linear1.out_features}, "
             f"norm_first={m.norm_first}, activation={act})")
    drop = ([] if m.dropout.p == 0 and sa.dropout == 0 and ca.dropout == 0 else
            ["  dropout is identity in eval mode (not represented)"])

    def sub_block(title, mha, local, norm, q, key, kpm, mask, causal, head_name):
        eps = lit(float(ctx.module.get_submodule(norm).eps))
        if m.norm_first:
            how = [f"  {title}, pre-norm: x + f({norm}(x)) = one head with pre = [layer_norm] ({norm}) on the "
                   "query and π = identity on the raw input (the residual):"]
            pre, post = [f"layer_norm(eps = {eps})"], []
        else:
            how = [f"  {title}, post-norm: {norm}(x + f(x)) = one head with π = identity (the residual) and "
                   f"post = [layer_norm] ({norm}):"]
            pre, post = [], [f"layer_norm(eps = {eps})"]
        comment = ([where] if key is None else []) + how + _head_comment(mha, key is not None) + drop
        y, name = _attention(ctx, mha, f"{local}.", head_name, q, key, key, kpm, mask, causal, ["pi = identity"],
                             comment, pre, post, need_weights=False)
        link_norm(ctx, name, norm, m.norm_first)
        return y

    h = sub_block("self-attention sub-block", sa, "self_attn", "norm1", x, None, ctx.get("tgt_key_padding_mask"),
                  ctx.get("tgt_mask"), bool(ctx.get("tgt_is_causal", False)), f"{base}_self")
    h = sub_block("cross-attention sub-block (queries: the target; keys and data: memory)", ca, "multihead_attn",
                  "norm2", h, memory, ctx.get("memory_key_padding_mask"), ctx.get("memory_mask"),
                  bool(ctx.get("memory_is_causal", False)), f"{base}_cross")
    y = feed_forward(ctx, m, h, base, act, "norm3")
    y.items_from = x.items_from
    return y


def transformer_decoder(m: nn.TransformerDecoder, ctx: Context) -> Value:
    """nn.TransformerDecoder = its layers in order on (tgt, memory), then the optional final norm.

    torch reads ``tgt_is_causal=None`` by comparing the example's ``tgt_mask`` with a causal mask; the spec
    applies that mask as given (equal where torch swaps it for SDPA's causal mask), so another mask at run time
    is applied too. An explicit ``tgt_is_causal=True`` becomes ``causal = true``."""
    x = ctx.get("tgt")
    kw = {k: ctx.get(k) for k in ("memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask")}
    kw.update(tgt_mask=ctx.get("tgt_mask"), tgt_is_causal=ctx.get("tgt_is_causal") is True,
              memory_is_causal=bool(ctx.get("memory_is_causal", False)))
    for i, layer in enumerate(m.layers):
        x = ctx.child(layer, f"layers.{i}", [x, ctx.get("memory")], kw)
    if m.norm is not None:
        x = ctx.child(m.norm, "norm", [x], {})
    return x


def transformer(m: nn.Transformer, ctx: Context) -> Value:
    """nn.Transformer(src, tgt, ...) = encoder(src) -> memory, decoder(tgt, memory) (each stack with its final
    norm); the source's item count is the symbol S, the target's T."""
    src, tgt = ctx.get("src"), ctx.get("tgt")
    bf = m.batch_first
    for v, sym, what in ((src, "S", "src"), (tgt, "T", "tgt")):
        ctx.sequence(v, m.d_model, sym, bf, what)
    memory = _sub(ctx, m.encoder, "encoder", [src],
                  {"mask": ctx.get("src_mask"), "src_key_padding_mask": ctx.get("src_key_padding_mask"),
                   "is_causal": ctx.get("src_is_causal")}, src.shape)
    kw = {k: ctx.get(k) for k in ("tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask",
                                  "tgt_is_causal", "memory_is_causal")}
    return _sub(ctx, m.decoder, "decoder", [tgt, memory], kw, tgt.shape)


def register_all() -> None:
    register_converter(nn.TransformerDecoderLayer, transformer_decoder_layer)
    register_converter(nn.TransformerDecoder, transformer_decoder)
    register_converter(nn.Transformer, transformer)
