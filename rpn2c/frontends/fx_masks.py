"""The attention-mask recogniser: the mask a library builds in forward from a padding mask input (transformers'
``masking_utils``: ``attention_mask [B, S]``, 1 = attend, cast, combined with the causal mask, expanded to
``[B, 1, T, S]``) is read back as the attention ξ's ``key_padding`` (a ``keep_mask`` input) and ``causal``.

The mask's subgraph is a function of that one input (other inputs only through their sizes). It is identified by
what it computes, not by the library's code: re-run on probe padding masks, it must equal
``keep[b, s] ∧ (s ≤ t if causal)`` (a bool mask, or an additive one of 0 and at most the dtype's lowest value,
which softmax reads alike) on every probe.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

from rpn2c.frontends.fx_match import Miss, ancestors, is_meta, users


@dataclass
class PaddingMask:
    input: fx.Node | None  # the padding-mask placeholder [B, S] (None: a causal mask made from sizes)
    causal: bool
    nodes: set[fx.Node]  # the mask's subgraph (absorbed)


def _dependents(gm: fx.GraphModule, source: fx.Node, target: fx.Node) -> list[fx.Node]:
    """The nodes on a path from ``source`` to ``target``, in graph order."""
    up = ancestors(target)
    down: set[fx.Node] = {source}
    for n in gm.graph.nodes:
        if n not in down and any(a in down for a in n.all_input_nodes):
            down.add(n)
    return [n for n in gm.graph.nodes if n in up and n in down]


def _feeding(gm: fx.GraphModule, mask: fx.Node) -> set[fx.Node]:
    """The nodes computed only for ``mask`` (every data reader of each is one of them, or ``mask``'s own readers)."""
    up = ancestors(mask, through_sizes=False)
    own = {mask}
    for n in reversed(gm.graph.nodes):
        if n in up and n not in own and n.op != "placeholder" and not is_meta(n) and users(n) and \
                all(u in own for u in users(n)):
            own.add(n)
    return own


def _evaluate(gm: fx.GraphModule, values: dict, nodes: list[fx.Node], probe: torch.Tensor) -> torch.Tensor:
    """``nodes[-1]`` recomputed with the placeholder ``nodes[0]`` holding ``probe`` (every other value recorded)."""
    interp = fx.Interpreter(gm, garbage_collect_values=False)
    interp.env = {n: v for n, v in values.items() if n not in nodes}
    interp.env[nodes[0]] = probe
    with torch.no_grad():
        for n in nodes[1:]:
            interp.env[n] = interp.run_node(n)
    return interp.env[nodes[-1]]


def _probes(example: torch.Tensor) -> list[torch.Tensor]:
    """Padding masks shaped and typed like the example: right padding of every length, and random patterns (the
    first key always kept, so that no query row is blocked whole)."""
    b, s = example.shape
    g = torch.Generator().manual_seed(0)
    out = [torch.arange(s).expand(b, s) < torch.randint(1, s + 1, (b, 1), generator=g) for _ in range(3)]
    for _ in range(3):
        m = torch.rand(b, s, generator=g) < 0.6
        m[:, 0] = True
        out.append(m)
    return [m.to(example.dtype) for m in out]


def _reads_as(mask: torch.Tensor, keep: torch.Tensor) -> bool:
    """``mask`` (bool, True = attend; or additive) allows exactly ``keep`` (broadcast)."""
    if mask.dtype == torch.bool:
        allowed = mask
    elif mask.is_floating_point():
        lowest = torch.finfo(mask.dtype).min
        if not bool(((mask == 0) | (mask <= lowest)).all()):
            return False
        allowed = mask == 0
    else:
        return False
    try:
        return torch.equal(*torch.broadcast_tensors(allowed, keep))
    except RuntimeError:
        return False


def padding_mask(gm: fx.GraphModule, values: dict, mask: fx.Node) -> PaddingMask:
    """The padding input and causality of the attention mask ``mask`` [B, 1, T, S] (raises :class:`Miss`)."""
    inputs = [n for n in ancestors(mask, through_sizes=False) if n.op == "placeholder"]
    t, s = values[mask].shape[-2:]
    causal = torch.ones(t, s, dtype=torch.bool).tril(s - t)
    if not inputs and _reads_as(values[mask], causal):  # a causal mask made from sizes
        return PaddingMask(None, True, _feeding(gm, mask))
    if len(inputs) != 1:
        raise Miss(f"the attn_mask '{mask.name}' is made from {len(inputs)} model inputs and is not causal (a "
                   "padding mask [B, S] maps to key_padding, a causal mask made from sizes to causal)")
    source = inputs[0]
    example = values.get(source)
    if not isinstance(example, torch.Tensor) or example.dim() != 2 or example.is_floating_point():
        raise Miss(f"the attn_mask is made from '{source.name}', not a bool or integer padding mask [B, S]")
    nodes = _dependents(gm, source, mask)
    for form in (False, True):
        if all(_reads_as(_evaluate(gm, values, nodes, p), p.bool()[:, None, None, :] & (causal if form else True))
               for p in _probes(example)):
            return PaddingMask(source, form, set(nodes[1:]))
    raise Miss(f"the attn_mask '{mask.name}' built from '{source.name}' is neither its key padding nor the key "
               "padding with the causal mask (probed on padding masks)")
