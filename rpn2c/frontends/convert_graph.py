"""Converter for torch_geometric.nn.GCNConv (registered once torch_geometric is imported).

GCNConv = a head with a graph instance ξ from the edge list, symmetric normalisation D^-1/2 (A+I) D^-1/2 with PyG's
``add_remaining_self_loops`` and target-side degrees (catalog §5.3: the paper's eq 176/177 are column/row
normalisations, neither is Kipf's; §8 item 13), κ identity, ψ identity = Θ, and the bias added after aggregation.
"""

from __future__ import annotations

from rpn2c.frontends.torch_import import Context, Value, register_converter


def gcn_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.GCNConv(x, edge_index[, edge_weight])."""
    if m.improved:
        ctx.fail("improved=True", "self-loops of weight 2 (Â = A + 2I) have no graph ξ setting")
    if m.cached:
        ctx.fail("cached=True", "the cached normalisation would be reused for a different graph; the spec "
                                "recomputes it on every call")
    if getattr(m, "aggr", "add") != "add" or getattr(m, "flow", "source_to_target") != "source_to_target":
        ctx.fail(f"aggr={m.aggr!r}, flow={m.flow!r}", "only sum aggregation from source to target")
    x, ei, ew = ctx.get("x"), ctx.get("edge_index"), ctx.get("edge_weight")
    if not isinstance(ei, Value):
        ctx.fail(f"edge_index={type(ei).__name__}", "only an edge list [2, E] (not a SparseTensor adjacency)")
    if not isinstance(x, Value):
        ctx.fail(f"x={type(x).__name__}", "expected a node feature tensor")
    f = m.in_channels
    if x.kind is None:
        if len(x.shape) == 2:
            ctx.declare(x, "items", f"nodes[{{items}}, {x.shape[1]}]", batched=False, item_axis=0, item_symbol="N")
        elif len(x.shape) == 3:
            ctx.declare(x, "items", f"nodes[B, {{items}}, {x.shape[2]}]", item_axis=1, item_symbol="N")
        else:
            ctx.fail(None, f"node features of shape {list(x.shape)}")
    elif x.kind != "items" or x.time_major:
        ctx.fail(None, f"node features must be nodes [N, F] or [B, N, F], got a {x.kind} value")
    if x.features != f:
        ctx.fail(f"in_channels={f}", f"the input has {x.features} features")
    ctx.declare(ei, "edges", "edges[2, E]")
    graph = [f"edges = {ei.name}"]
    uses = [ei]
    if ew is not None:
        ctx.declare(ew, "edge_weight", "edge_weight[E]")
        graph.append(f"weight = {ew.name}")
        uses.append(ew)
    if m.normalize:
        graph += ['norm = "symmetric"', f"self_loops = {'true' if m.add_self_loops else 'false'}"]
        norm = ("D^-1/2 (A+I) D^-1/2 (self-loops added where missing, as add_remaining_self_loops)"
                if m.add_self_loops else "D^-1/2 A D^-1/2 (no self-loops)")
    else:
        graph += ['norm = "none"', "self_loops = false"]
        norm = "A itself (normalize=False: no normalisation, no self-loops)"
    settings = [f"xi_instance = graph({', '.join(graph)})", f"out = {m.out_channels}"]
    if m.bias is None:
        settings.append("bias = false")
    name = ctx.name("gcn")
    comment = [f"{ctx.where()}({f} -> {m.out_channels}): a graph convolution head:",
               f"  ξ_instance = graph from the edge list, A[target, source] = w, normalised {norm}",
               "  (degrees at the target, as PyG's gcn_norm); κ identity, ψ identity = Θ (lin.weight),",
               f"  {'a tied bias added after aggregation' if m.bias is not None else 'no bias'}, π zero"]
    y = ctx.head(x, settings, comment=comment, name=name, uses=uses)
    ctx.param(f"{name}.psi.weight", "lin.weight")
    if m.bias is not None:
        ctx.param(f"{name}.bias", "bias")
    return y


def register_all() -> None:
    from torch_geometric.nn import GCNConv

    register_converter(GCNConv, gcn_conv)
