"""Recognisers for forms timm's layers write out in ``forward`` (matched on the traced graph, never on a class name).

    x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training, momentum, eps)
        -> batch_norm(eps, momentum) on x: a module's own statistics and affine read in forward are that module's
           BatchNorm (timm's ``BatchNormAct2d``: an ``nn.BatchNorm2d`` subclass whose forward calls ``F.batch_norm``
           on its buffers, then its drop and act modules, which convert as themselves)
    qkv = self.qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4); q, k, v = qkv.unbind(0)
        -> the query, key and value as parts of one packed projection (the attention recogniser's ``fused`` form)

:func:`find` / :func:`emit` are the batch-norm recogniser (a row of ``fx_import.RECOGNISERS``); :func:`fused_qkv`
is read by ``fx_attention`` where it walks back from an attention operand; :func:`find_mixing` /
:func:`emit_mixing` are the token-mixing recogniser:

    x + mlp_tokens(norm1(x).transpose(1, 2)).transpose(1, 2)     (MLP-Mixer's token mixing; timm's ``MixerBlock``)
        -> a head per nn.Linear(T, T') with xi_instance = parameterized(out = T', bias = true), psi = eye
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from rpn2c.frontends.fx_match import Miss, calls as _is, shape as _shape, users as _users

_BN_ARGS = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
_BN_TENSORS = ("running_mean", "running_var", "weight", "bias")
_BN = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}  # by the input's spatial rank (1: [B, C, L])


@dataclass
class BatchNorm:
    """``F.batch_norm`` on the tensors of the module at ``owner`` (its path in the traced module)."""

    x: fx.Node
    anchor: fx.Node
    owner: str
    momentum: float | None
    eps: float
    affine: bool
    nodes: set[fx.Node]


def _owner_of(node: object) -> tuple[str, str] | None:
    """``self.<owner>.<name>`` read by a ``get_attr`` node -> (owner, name)."""
    if not isinstance(node, fx.Node) or node.op != "get_attr":
        return None
    owner, _, name = str(node.target).rpartition(".")
    return owner, name


def _batch_norm(gm: fx.GraphModule, values: dict, node: fx.Node) -> BatchNorm:
    o = dict(zip(_BN_ARGS, node.args), **node.kwargs)
    reads = {k: _owner_of(o.get(k)) for k in _BN_TENSORS}
    if reads["running_mean"] is None or reads["running_var"] is None:
        raise Miss("F.batch_norm without running statistics read from a module (self.running_mean, "
                   "self.running_var): batch statistics in eval have no batch_norm form")
    owners = {r[0] for r in reads.values() if r is not None}
    if len(owners) != 1 or any(r is not None and r[1] != k for k, r in reads.items()):
        raise Miss("F.batch_norm reads its statistics and affine from different modules or under other names "
                   "(the form is one module's running_mean, running_var, weight, bias)")
    if (o.get("weight") is None) != (o.get("bias") is None) or any(
            o.get(k) is not None and reads[k] is None for k in ("weight", "bias")):
        raise Miss("F.batch_norm's weight and bias are not both the module's own (or both absent)")
    if o.get("training", False):
        raise Miss("F.batch_norm with training=True normalises by batch statistics in eval")
    owner = owners.pop()
    module = gm.get_submodule(owner) if owner else gm
    rank = len(_shape(values, o["input"]) or ()) - 2
    if rank not in _BN:
        raise Miss(f"F.batch_norm on a {rank + 2}-D input: batch_norm takes [B, C, ...] with 1 to 3 spatial axes")
    momentum = getattr(module, "momentum", o.get("momentum", 0.1))
    absorbed = {n for k in _BN_TENSORS if isinstance(n := o.get(k), fx.Node) and _users(n) == [node]}
    return BatchNorm(o["input"], node, owner, momentum, float(o.get("eps", 1e-5)), o.get("weight") is not None,
                     {node} | absorbed)


def find(gm: fx.GraphModule, values: dict) -> tuple[dict[fx.Node, BatchNorm], dict[fx.Node, str]]:
    found, misses = {}, {}
    for node in gm.graph.nodes:
        if _is(node, F.batch_norm, torch.batch_norm):
            try:
                found[node] = _batch_norm(gm, values, node)
            except Miss as err:
                misses[node] = str(err)
    return found, misses


def emit(conv, node: fx.Node, m: BatchNorm):
    """The owner's tensors as an ``nn.BatchNormNd`` (the same tensor objects, so the links name the owner's
    ``running_mean`` …), converted by the BatchNorm converter."""
    owner = conv.gm.get_submodule(m.owner) if m.owner else conv.gm
    x = conv.value(node, conv.env[m.x], "batch_norm input")
    rank = len(_shape(conv.values, m.x)) - 2
    bn = _BN[rank](owner.running_mean.shape[0], eps=m.eps, momentum=m.momentum, affine=m.affine)
    bn = bn.to(dtype=owner.running_mean.dtype)
    if m.affine:
        bn.weight, bn.bias = owner.weight, owner.bias
    bn.running_mean, bn.running_var = owner.running_mean, owner.running_var
    tracked = getattr(owner, "num_batches_tracked", None)
    if isinstance(tracked, torch.Tensor):
        bn.num_batches_tracked = tracked
    return conv.leaf(node, bn, x)


# ------------------------------------------------------------------------------------------------ fused qkv
_PERMUTE = ("permute", torch.permute)
_RESHAPE = ("view", "reshape", torch.reshape)


def _dims(node: fx.Node) -> tuple[int, ...]:
    d = node.args[1:]
    return tuple(d[0]) if len(d) == 1 and isinstance(d[0], (tuple, list)) else tuple(d)


def fused_qkv(values: dict, node: fx.Node) -> tuple[fx.Node, int, int, int, set[fx.Node]] | None:
    """``node`` = ``qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)[i]`` -> (the packed
    projection's node, i, H, D, the nodes between), else None."""
    if not _is(node, operator.getitem) or not isinstance(node.args[1], int):
        return None
    unbind, index = node.args
    if not _is(unbind, "unbind", torch.unbind) or unbind.kwargs.get("dim", unbind.args[1] if len(unbind.args) > 1
                                                                        else 0) != 0:
        return None
    perm = unbind.args[0]
    if not _is(perm, *_PERMUTE) or _dims(perm) != (2, 0, 3, 1, 4):
        return None
    split = perm.args[0]
    shape, flat = _shape(values, split), _shape(values, split.args[0]) if _is(split, *_RESHAPE) else None
    if shape is None or flat is None or len(shape) != 5 or shape[2] != 3 or \
            flat != (shape[0], shape[1], 3 * shape[3] * shape[4]):
        raise Miss(f"'{node.name}' unbinds no [B, N, 3·H·D] -> [B, N, 3, H, D] view of a packed projection")
    return split.args[0], index, shape[3], shape[4], {node, unbind, perm, split}


# ------------------------------------------------------------------------------------------------ token mixing
_SWAP = ("transpose", torch.transpose, "permute", torch.permute)


def _swaps_last_two(values: dict, node: object) -> bool:
    """``node`` exchanges the two axes of a batch-first 3-D value (``transpose(1, 2)``, ``permute(0, 2, 1)``)."""
    if not _is(node, *_SWAP) or len(_shape(values, node.args[0]) or ()) != 3:
        return False
    dims = tuple(d % 3 for d in _dims(node))
    return sorted(dims) == [1, 2] if _is(node, "transpose", torch.transpose) else dims == (0, 2, 1)


def _commutes(values: dict, module: nn.Module, node: fx.Node) -> bool:
    """``module`` acts on each entry alone on the example (an activation, dropout in eval, an identity): applied to
    the transposed input it gives the transposed output."""
    x, y = values.get(node.args[0]), values.get(node)
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.ndim != 3:
        return False
    try:
        with torch.no_grad():
            swapped = module(x.transpose(1, 2).contiguous())
    except (RuntimeError, ValueError, TypeError):  # a module of a fixed width along the last axis
        return False
    return isinstance(swapped, torch.Tensor) and swapped.shape == y.transpose(1, 2).shape and \
        torch.equal(swapped, y.transpose(1, 2))


@dataclass
class TokenMixing:
    """``mlp(x.transpose(1, 2)).transpose(1, 2)``: the modules (``nn.Linear`` across the items, or entrywise) of
    the chain between the two transposes, in order."""

    x: fx.Node
    anchor: fx.Node
    chain: list[fx.Node]
    nodes: set[fx.Node]


def _mixing(gm: fx.GraphModule, values: dict, start: fx.Node) -> TokenMixing | None:
    chain, node, linear = [], start, False  # a miss is reported once a Linear across the items was seen
    while True:
        users = _users(node)
        if len(users) != 1:
            return _miss(values, node, "is read more than once inside the token mixing", chain) if linear \
                else None
        node = users[0]
        if _swaps_last_two(values, node):
            break
        if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
            return _miss(values, node, "is no module call between the two transposes", chain) if linear \
                else None
        module = gm.get_submodule(node.target)
        if type(module) is nn.Linear:
            linear = True
        elif not _commutes(values, module, node):
            return _miss(values, node, "mixes entries of the transposed value and is no nn.Linear across the "
                         "items", chain) if linear else None
        chain.append(node)
    return TokenMixing(start.args[0], node, chain, {start, *chain, node}) if linear else None


@dataclass
class _Refused:
    """A Linear across the items inside a chain the token-mixing form does not cover: refused there, by name."""

    anchor: fx.Node
    nodes: set[fx.Node]


class _ChainMiss(Miss):
    def __init__(self, why: str, at: fx.Node):
        super().__init__(why)
        self.at = at


def _miss(values: dict, node: fx.Node, why: str, chain: list[fx.Node]):
    """Refuse the chain when a transpose back closes it further on (a token mixing the form does not cover);
    else it is no token mixing at all (a Linear over the items of a signal turned into a sequence): None."""
    after = node
    for _ in range(32):
        users = _users(after)
        if len(users) != 1:
            return None
        after = users[0]
        if _swaps_last_two(values, after):
            raise _ChainMiss(f"'{node.name}' {why}", chain[0])
    return None


def find_mixing(gm: fx.GraphModule, values: dict) -> tuple[dict[fx.Node, TokenMixing | _Refused],
                                                           dict[fx.Node, str]]:
    found, misses = {}, {}
    for node in gm.graph.nodes:
        if _swaps_last_two(values, node):
            try:
                m = _mixing(gm, values, node)
            except _ChainMiss as err:  # refused at the chain's first module, naming the reason
                misses[err.at] = str(err)
                found[err.at] = _Refused(err.at, {err.at})
                continue
            if m is not None:
                found[m.anchor] = m
    return found, misses


def emit_mixing(conv, node: fx.Node, m: TokenMixing):
    """Each ``nn.Linear(T, T')`` of the chain is a head with the affine instance ξ ``parameterized(out = T')`` (its
    weight A = the Linear's [T', T], ``A z + b 1ᵀ``) and ψ = eye; each entrywise module converts as itself on the
    items."""
    if isinstance(m, _Refused):
        conv.fail(node, "it reads a transposed sequence [B, F, T] along its item axis: only the token-mixing chain "
                        "mlp(x.transpose(1, 2)).transpose(1, 2) of nn.Linear and entrywise modules converts")
    x = conv.value(node, conv.env[m.x], "token mixing input")
    ctx = conv.ctx(node)
    ctx.fix_items(x)
    for n in m.chain:
        module = conv.gm.get_submodule(n.target)
        if type(module) is not nn.Linear:
            shape = x.shape
            x = conv.call_module(n, (x,), {})
            x.shape = shape  # the example ran on the transposed value (a post folded into the head reads its shape)
            continue
        ctx = conv.ctx(n)
        if x.shape[1] != module.in_features:
            conv.fail(n, f"nn.Linear({module.in_features}, {module.out_features}) across {x.shape[1]} items")
        name = conv.b.fresh(conv.base + str(n.target), "mix")
        bias = module.bias is not None
        features = x.shape[-1]
        x = ctx.head(x, [f"xi_instance = parameterized(out = {module.out_features}, bias = {str(bias).lower()})",
                         "psi = eye", f"out = {features}", "bias = false"],
                     comment=f"[{conv._qual(str(n.target))}] nn.Linear across the items (applied to the transposed "
                             f"sequence): the affine instance ξ A z + b 1ᵀ, A ∈ R^{module.out_features}x"
                             f"{module.in_features}", name=name, out_kind="items",
                     out_shape=(x.shape[0], module.out_features, features))
        conv.b.link(f"{name}.xi_instance.fab.W", conv._qual(str(n.target)), module, "weight", None, False, None)
        if bias:
            conv.b.link(f"{name}.xi_instance.bias", conv._qual(str(n.target)), module, "bias", None, False, None)
    return x


PATTERNS = {
    "token_mixing": "mlp(x.transpose(1, 2)).transpose(1, 2), mlp a chain of nn.Linear and entrywise modules -> "
                    "heads with xi_instance = parameterized(out = T', bias), psi = eye",
    "batch_norm": "F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=False, …) "
                  "-> batch_norm(eps, momentum) holding that module's tensors",
    "fused_qkv": "qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0) -> q, k, v as the packed "
                 "in_proj_weight's thirds",
}
