"""Converters for torch_geometric.nn's convs (registered once torch_geometric is imported).

GCNConv = a head with a graph instance ξ from the edge list, symmetric normalisation D^-1/2 (A+I) D^-1/2 with PyG's
``add_remaining_self_loops`` and target-side degrees (catalog §5.3: the paper's eq 176/177 are column/row
normalisations, neither is Kipf's; §8 item 13), κ identity, ψ identity = Θ, and the bias added after aggregation.

GATConv = ``heads = H`` heads fused by concat (or mean), head h: a graph_attention instance ξ (scores
LeakyReLU(a_srcᵀ W_h x_j + a_dstᵀ W_h x_i), softmax over the edges into i), κ identity, ψ identity = W_h and its
slice of the bias added after aggregation.

SAGEConv = a head with a graph instance ξ from the edge list (norm "row" = the mean over the edges into each node,
0 for a node without any; norm "none" for aggr add/sum), κ identity, ψ identity = lin_l with its bias added after
aggregation, and the linear remainder π = lin_r on the root node (root_weight=True). GraphConv is the same head
with lin_rel, lin_root and the edge weights as A's entries.

ChebConv = Σ_{k<K} T_k(L̃) X Θ_k + b: a layer of K heads fused by sum, head k with the chebyshev_graph instance ξ
of order k (L̃ = 2L/λ_max − I, L from PyG's get_laplacian, normalisation "sym" or "rw", λ_max = 2: PyG's 2·max L
for nonnegative weights) and ψ identity = Θ_k = lins[k], the bias once on head t0 (K = 1: one head).

GINConv = a head with a hybrid instance ξ = graph (the sum over the edges into each node) + (1 + eps)·identity (sum
fusion, fixed weights), κ identity, ψ eye (no parameters), no bias; with train_eps=True the graph ξ alone and the
learned self term as the remainder π = scaled_identity, (1 + eps)·x; then its ``nn`` converted on the aggregated
features by the converters of its modules.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rpn2c.frontends.kit import Context, Link, Value, convert_module, register_converter


def _node_inputs(ctx: Context, f: int, batched: bool = True) -> tuple[Value, Value]:
    """The node features ``x`` ([N, F], or [B, N, F] where ``batched``) and the edge list, declared."""
    x, ei = ctx.get("x"), ctx.get("edge_index")
    if not isinstance(ei, Value):
        ctx.fail(f"edge_index={type(ei).__name__}", "only an edge list [2, E] (not a SparseTensor adjacency)")
    if not isinstance(x, Value):
        ctx.fail(f"x={type(x).__name__}", "expected a node feature tensor")
    if x.kind is None:
        if len(x.shape) == 2:
            ctx.declare(x, "items", f"nodes[{{items}}, {x.shape[1]}]", batched=False, item_axis=0, item_symbol="N")
        elif len(x.shape) == 3 and batched:
            ctx.declare(x, "items", f"nodes[B, {{items}}, {x.shape[2]}]", item_axis=1, item_symbol="N")
        else:
            ctx.fail(None, f"node features of shape {list(x.shape)}")
    elif x.kind != "items" or x.time_major:
        ctx.fail(None, f"node features must be nodes [N, F]{' or [B, N, F]' if batched else ''}, got a {x.kind} "
                       "value")
    if x.features != f:
        ctx.fail(f"in_channels={f}", f"the input has {x.features} features")
    ctx.declare(ei, "edges", "edges[2, E]")
    return x, ei


def gcn_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.GCNConv(x, edge_index[, edge_weight])."""
    if m.improved:
        ctx.fail("improved=True", "self-loops of weight 2 (Â = A + 2I) have no graph ξ setting")
    if m.cached:
        ctx.fail("cached=True", "the cached normalisation would be reused for a different graph; the spec "
                                "recomputes it on every call")
    if getattr(m, "aggr", "add") != "add" or getattr(m, "flow", "source_to_target") != "source_to_target":
        ctx.fail(f"aggr={m.aggr!r}, flow={m.flow!r}", "only sum aggregation from source to target")
    f = m.in_channels
    x, ei = _node_inputs(ctx, f)
    ew = ctx.get("edge_weight")
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


@dataclass(frozen=True)
class _Entry(Link):
    """compiled tensor = source[index]: one head's attention vector ``att_src[0, h]`` of GATConv's [1, H, C]."""

    index: tuple[int, ...] = ()

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return t[self.index]

    def scatter(self, g: torch.Tensor, source_shape) -> torch.Tensor:
        out = g.new_zeros(tuple(source_shape))
        out[self.index] = g.reshape(out[self.index].shape)
        return out


def _param_entry(ctx: Context, compiled: str, torch_local: str, index: tuple[int, ...]) -> None:
    """``ctx.param`` for one entry ``torch_local[index]`` of a tensor (a Link slices rows only)."""
    ctx.param(compiled, torch_local)
    b = ctx.builder
    b.links[compiled] = _Entry(b.links[compiled].source, index=index)
    b.tensors[compiled] = b.tensors[compiled][index].clone()


def gat_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.GATConv(x, edge_index): H heads of additive edge attention, concatenated or averaged."""
    if m.lin is None:
        ctx.fail(f"in_channels={m.in_channels}", "separate source/target projections (a bipartite GAT) have no "
                                                 "graph_attention setting")
    if m.edge_dim is not None or m.lin_edge is not None:
        ctx.fail(f"edge_dim={m.edge_dim}", "edge features in the scores have no graph_attention setting")
    if getattr(m, "res", None) is not None:
        ctx.fail("residual=True", "the residual projection is not converted")
    if getattr(m, "aggr", "add") != "add" or getattr(m, "flow", "source_to_target") != "source_to_target":
        ctx.fail(f"aggr={m.aggr!r}, flow={m.flow!r}", "only sum aggregation from source to target")
    for arg in ("edge_attr", "size", "return_attention_weights"):
        if ctx.get(arg) is not None:
            ctx.fail(f"{arg}=...", "only GATConv(x, edge_index)")
    f, h, c = m.in_channels, m.heads, m.out_channels
    x, ei = _node_inputs(ctx, f, batched=False)
    xi = [f"edges = {ei.name}", f"rank = {c}", f"negative_slope = {float(m.negative_slope)!r}", "share_psi = true"]
    if not m.add_self_loops:
        xi.append("self_loops = false")
    if m.dropout > 0:
        xi.append(f"dropout = {float(m.dropout)!r}")
    fuse = "concat" if m.concat else "mean"
    settings = ([f"heads = {h}"] if h > 1 else []) + [f"xi_instance = graph_attention({', '.join(xi)})", f"out = {c}"]
    shared_bias = m.bias is not None and h > 1 and not m.concat  # one bias after the mean, not one per head
    if m.bias is None or shared_bias:
        settings.append("bias = false")
    if h > 1:
        settings.append(f"fusion = {fuse}")
    name = ctx.name("gat")
    loops = "one self-loop per node replacing the listed ones" if m.add_self_loops else "the edges as listed"
    bias = "no bias" if m.bias is None else f"{'its slice of' if m.concat else 'all of'} the bias after aggregation"
    comment = [f"{ctx.where()}({f} -> {h} x {c}, {fuse}): {h} graph attention head(s) fused by {fuse}; per head:",
               f"  ξ_instance = softmax over the edges into each node ({loops}) of",
               f"  LeakyReLU_{m.negative_slope}(a_srcᵀ W x_j + a_dstᵀ W x_i) (W, a = lin.weight, att_src/att_dst slices),",
               f"  κ identity, ψ identity = W (the same tensor: share_psi = true), {bias}"]
    y = ctx.head(x, settings, comment=comment, name=name, uses=[ei])
    for i in range(h):
        p = name if h == 1 else f"{name}.heads.h{i}"
        rows = (i * c, (i + 1) * c)
        ctx.param(f"{p}.psi.weight", "lin.weight", rows=rows)
        _param_entry(ctx, f"{p}.xi_instance.att_src", "att_src", (0, i))
        _param_entry(ctx, f"{p}.xi_instance.att_dst", "att_dst", (0, i))
        if m.bias is not None and not shared_bias:
            ctx.param(f"{p}.bias", "bias", rows=rows if m.concat else None)
    if shared_bias:  # mean_h(z_h) + b: the bias once, after the heads' mean
        b = ctx.free(f"nodes[1, 1, {c}]", "bias", "items", (1, 1, c), prefix=f"{name}_bias", link_shape=(1, 1, c),
                     comment=f"{ctx.where()}.bias: added once after the mean of the heads")
        y = ctx.op("add", [y, b], name=ctx.fresh(f"{name}_out"), comment="the heads' mean plus the bias")
    return y


_AGGR_NORM = {"mean": ("row", "the mean over the edges into i (duplicates counted, 0 without any)"),
              "add": ("none", "the sum over the edges into i"), "sum": ("none", "the sum over the edges into i")}


def _aggregation(m, ctx: Context, weighted: bool) -> str:
    """The graph ξ's norm for ``m.aggr`` (a located error for what no graph ξ setting computes)."""
    aggr = m.aggr if isinstance(m.aggr, str) else type(m.aggr).__name__
    if aggr not in _AGGR_NORM:
        ctx.fail(f"aggr={aggr!r}", "the graph ξ aggregates by a (normalised) sum: mean, add and sum convert; a max, "
                                   "min or learned aggregation is no product M·z of an instance matrix with the "
                                   "features, so no graph ξ setting computes it")
    if aggr == "mean" and weighted:
        ctx.fail("aggr='mean' with edge_weight", "PyG divides the weighted sum by the edge count, the row "
                                                 "normalisation by the sum of the weights")
    if getattr(m, "flow", "source_to_target") != "source_to_target":
        ctx.fail(f"flow={m.flow!r}", "only messages from source (row 0) to target (row 1)")
    if isinstance(m.in_channels, (tuple, list)):
        ctx.fail(f"in_channels={tuple(m.in_channels)}",
                 "separate source/target features (a bipartite layer) have no single-input graph head")
    if ctx.get("size") is not None:
        ctx.fail("size=...", "only the node features and the edge list (and edge weights)")
    return aggr


def _neighbour_root_head(m, ctx: Context, title: str, rel: str, root: str | None, weighted: bool = False,
                         project: str | None = None) -> Value:
    """``rel(aggr_{j->i} w_ji x_j) + root(x_i)``: one head, ξ = the graph, ψ = ``rel`` with its bias after
    aggregation, π = the linear remainder ``root`` (no bias) or zero. With ``project`` (a Linear's name) the
    neighbours send ``relu(project(x_j))`` (a perceptron head first), and the root term, which reads x itself, is a
    second head added to the graph head's output."""
    ew = ctx.get("edge_weight") if weighted else None
    aggr = _aggregation(m, ctx, ew is not None)
    f, out = m.in_channels, m.out_channels
    x, ei = _node_inputs(ctx, f)
    norm, what = _AGGR_NORM[aggr]
    graph, uses = [f"edges = {ei.name}"], [ei]
    if ew is not None:
        ctx.declare(ew, "edge_weight", "edge_weight[E]")
        graph.append(f"weight = {ew.name}")
        uses.append(ew)
    graph += [f'norm = "{norm}"', "self_loops = false"]
    settings = [f"xi_instance = graph({', '.join(graph)})", f"out = {out}"]
    has_bias = m.get_submodule(rel).bias is not None
    if not has_bias:
        settings.append("bias = false")
    if root is not None and project is None:
        settings.append("pi = linear(bias = false)")
    name = ctx.name(title.split()[0].lower())
    src = x
    if project is not None:
        src = ctx.head(x, [f"out = {f}"], name=ctx.fresh(f"{name}_proj"), post=["relu"], out_shape=x.shape,
                       comment=f"{ctx.where()}: project=True: the messages relu({project}(x_j)), a perceptron head")
        ctx.param(f"{src.name}.psi.weight", f"{project}.weight")
        ctx.param(f"{src.name}.bias", f"{project}.bias")
    entry = "w (edge_weight)" if ew is not None else "1"
    comment = [f"{ctx.where()}({f} -> {out}, aggr={aggr}): a {title} head:",
               f"  ξ_instance = graph from the edge list, A[target, source] = {entry} per edge, norm {norm}: {what};",
               f"  κ identity, ψ identity = {rel}, {'its bias added after aggregation' if has_bias else 'no bias'},",
               f"  π = {f'linear remainder {root} on the root node (no bias)' if root and not project else 'zero'}"]
    y = ctx.head(src, settings, comment=comment, name=ctx.fresh(f"{name}_agg") if project and root else name, uses=uses)
    ctx.param(f"{y.name}.psi.weight", f"{rel}.weight")
    if has_bias:
        ctx.param(f"{y.name}.bias", f"{rel}.bias")
    if root is not None and project is None:
        ctx.param(f"{name}.pi.weight", f"{root}.weight")
    elif root is not None:
        r = ctx.head(x, [f"out = {out}", "bias = false"], name=ctx.fresh(f"{name}_root"),
                     comment=f"  the root term {root}(x_i) on the unprojected features: a perceptron head, no bias")
        ctx.param(f"{r.name}.psi.weight", f"{root}.weight")
        y = ctx.op("add", [y, r], name=name, comment="  graph head + root head")
    return y


def sage_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.SAGEConv(x, edge_index): lin_l(aggr_{j->i} x_j) + lin_r(x_i), then l2_normalize
    processing with normalize=True."""
    y = _neighbour_root_head(m, ctx, "SAGE (GraphSAGE)", "lin_l", "lin_r" if m.root_weight else None,
                             project="lin" if m.project else None)
    if m.normalize:
        y, _ = ctx.process(y, "l2_normalize", comment="normalize=True: each node's output divided by its L2 norm")
    return y


def graph_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.GraphConv(x, edge_index[, edge_weight]): lin_rel(aggr_{j->i} w_ji x_j) + lin_root(x_i)."""
    return _neighbour_root_head(m, ctx, "GraphConv (Morris et al.)", "lin_rel", "lin_root", weighted=True)


def gin_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.GINConv(x, edge_index): nn((1 + eps)·x_i + Σ_{j->i} x_j)."""
    aggr = m.aggr if isinstance(m.aggr, str) else type(m.aggr).__name__
    if aggr not in ("add", "sum") or getattr(m, "flow", "source_to_target") != "source_to_target":
        ctx.fail(f"aggr={aggr!r}, flow={m.flow!r}", "only sum aggregation from source to target")
    if ctx.get("size") is not None:
        ctx.fail("size=...", "only GINConv(x, edge_index)")
    x = ctx.get("x")
    if not isinstance(x, Value):
        ctx.fail(f"x={type(x).__name__}", "expected a node feature tensor (not a bipartite pair)")
    f = x.shape[-1]
    x, ei = _node_inputs(ctx, f)
    name = ctx.name("gin")
    if isinstance(m.eps, torch.nn.Parameter):  # train_eps=True: the self term is a learned remainder
        settings = [f'xi_instance = graph(edges = {ei.name}, norm = "none", self_loops = false)', f"out = {f}",
                    "psi = eye", "bias = false", "pi = scaled_identity(offset = 1.0)"]
        comment = [f"{ctx.where()}(train_eps=True): the GIN aggregation (1 + eps)·x_i + Σ_(j->i) x_j as a head:",
                   "  ξ_instance = graph, A[target, source] = 1 per edge (summed, no normalisation), κ identity,",
                   "  ψ eye (no parameters), no bias, π = scaled_identity (1 + eps)·x with eps the learned scalar;",
                   "  the module's nn follows on its output"]
    else:
        self_weight = 1.0 + float(m.eps)
        xi = (f'hybrid(parts = ["graph", "identity"], fusion = "sum", weights = [1.0, {self_weight!r}], '
              f'edges = {ei.name}, norm = "none", self_loops = false)')
        settings = [f"xi_instance = {xi}", f"out = {f}", "psi = eye", "bias = false"]
        comment = [f"{ctx.where()}(eps={float(m.eps)!r}): the GIN aggregation (1 + eps)·x_i + Σ_(j->i) x_j as a "
                   f"head:", f"  ξ_instance = A + {self_weight!r}·I, A[target, source] = 1 per edge (summed, no "
                   "normalisation),", "  κ identity, ψ eye (no parameters), no bias, π zero; the module's nn "
                   "follows on its output"]
    agg = ctx.head(x, settings, comment=comment, name=name, uses=[ei], out_shape=x.shape)
    if isinstance(m.eps, torch.nn.Parameter):
        ctx.param(f"{name}.pi.eps", "eps", shape=())
    path = f"{ctx.path}.nn" if ctx.path else "nn"
    return convert_module(ctx.builder, m.nn, path, [agg], {}, f"{name}_nn")


def cheb_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.ChebConv(x, edge_index[, edge_weight]): Σ_{k<K} lins[k](T_k(L̃) x) + bias, a layer of K
    heads fused by sum, head k with ξ = chebyshev_graph(order = k) and ψ = lins[k]."""
    norm = {"sym": "sym", "rw": "rw"}.get(m.normalization)
    if norm is None:
        ctx.fail(f"normalization={m.normalization!r}", "PyG takes λ_max = 2·max(L) of the unnormalised D − A, the "
                                                       "largest degree of the input graph, which the spec's "
                                                       "constant lambda_max cannot follow; 'sym' and 'rw' convert")
    for arg in ("lambda_max", "batch"):
        if ctx.get(arg) is not None:
            ctx.fail(f"{arg}=...", "λ_max given per call has no chebyshev_graph setting; only ChebConv(x, "
                                   "edge_index[, edge_weight]) with PyG's λ_max = 2 converts")
    if getattr(m, "aggr", "add") != "add" or getattr(m, "flow", "source_to_target") != "source_to_target":
        ctx.fail(f"aggr={m.aggr!r}, flow={m.flow!r}", "only sum aggregation from source to target")
    f, out, k = m.in_channels, m.out_channels, len(m.lins)
    x, ei = _node_inputs(ctx, f)
    ew = ctx.get("edge_weight")
    graph, uses = [f"edges = {ei.name}"], [ei]
    if ew is not None:
        ctx.declare(ew, "edge_weight", "edge_weight[E]")
        graph.append(f"weight = {ew.name}")
        uses.append(ew)
    graph.append(f'norm = "{norm}"')

    def body_of(i: int) -> list[str]:
        bias = [] if i == 0 and m.bias is not None else ["bias = false"]
        return [f"xi_instance = chebyshev_graph({', '.join(graph + [f'order = {i}'])})", f"out = {out}", *bias]

    lap = "I − D^-1/2 A D^-1/2" if norm == "sym" else "I − A D^-1"
    name = ctx.name("cheb")
    comment = [f"{ctx.where()}({f} -> {out}, K={k}, normalization={norm!r}): a ChebNet layer Σ_(k<K) T_k(L̃) X Θ_k:",
               f"  head t_k: ξ_instance = T_k(L̃), L̃ = 2L/λ_max − I with L = {lap} from the edge list (self-loops",
               "  dropped, degrees at the source, as PyG's get_laplacian) and λ_max = 2 (PyG's 2·max L = 2 for",
               "  nonnegative edge weights); κ identity, ψ identity = Θ_k (lins[k].weight); fused by sum,",
               f"  {'the bias once (on head t0)' if m.bias is not None else 'no bias'}"]
    if k == 1:  # one head: T_0(L̃) = I, lins[0](x) + bias
        y = ctx.head(x, body_of(0), comment=comment, name=name, uses=uses)
        prefix = [name]
    else:
        heads = ["\n".join([f"head t{i} {{"] + [f"      {s}" for s in body_of(i)] + ["    }"]) for i in range(k)]
        y = ctx.head(x, heads + ["fusion = sum"], comment=comment, kind="layer", name=name, uses=uses)
        prefix = [f"{name}.heads.t{i}" for i in range(k)]
    for i, p in enumerate(prefix):
        ctx.param(f"{p}.psi.weight", f"lins.{i}.weight")
    if m.bias is not None:
        ctx.param(f"{prefix[0]}.bias", "bias")
    return y


def gatv2_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.GATv2Conv: refused with what is missing."""
    ctx.fail(None, "GATv2 scores an edge by aᵀ LeakyReLU(W_l x_j + b_l + W_r x_i + b_r) (the nonlinearity "
                   "inside, two biased projections lin_l, lin_r, and lin_l's bias in every message); the "
                   "graph_attention ξ scores LeakyReLU(a_srcᵀ W x_j + a_dstᵀ W x_i) (GAT, one shared W, no bias), "
                   "so only a GATv2 score form in graph_attention (a second projection and the score biases) would "
                   "make it convertible; GATConv converts")


def transformer_conv(m, ctx: Context) -> Value:
    """torch_geometric.nn.TransformerConv: refused with what is missing."""
    ctx.fail(None, "TransformerConv scores an edge by (W_q x_i + b_q)·(W_k x_j + b_k)/√d with a softmax over each "
                   "node's incoming edges as listed (no self-loops) and sums W_v x_j + b_v over them (b_v inside "
                   "the weighted sum: absent at a node without incoming edges), plus lin_skip(x_i) or its beta gate; "
                   "the scores are the hybrid graph ∘ attention ξ's, but a value bias inside ξ has no head slot, so "
                   "no converter maps it yet; GATConv converts")


def pyg_batch_norm(m, ctx: Context) -> Value:
    """torch_geometric.nn.norm.BatchNorm: its inner ``nn.BatchNorm1d`` over the node features (in eval mode the
    single-node branch computes the same from the running statistics)."""
    path = f"{ctx.path}.module" if ctx.path else "module"
    return convert_module(ctx.builder, m.module, path, [ctx.arg(0)], {}, ctx.name("bn"))


def pyg_layer_norm(m, ctx: Context) -> Value:
    """torch_geometric.nn.norm.LayerNorm(mode='node') = ``F.layer_norm`` over each node's features (nn.LayerNorm);
    mode='graph' (PyG's default) normalises by the mean and std of every feature of every node of the graph."""
    if m.mode != "node":
        ctx.fail(f"mode={m.mode!r}", "a graph-wide normalisation (one mean and std over all nodes and features of "
                                     "a graph) has no spec form; mode='node' (a per-node layer norm) converts")
    if ctx.get("batch") is not None:
        ctx.fail("batch=...", "only LayerNorm(x)")
    ln = torch.nn.LayerNorm(m.in_channels, m.eps, elementwise_affine=m.weight is not None, bias=m.bias is not None)
    if m.weight is not None:
        ln.weight = m.weight  # the same tensors: the links name them under this module's path
    if m.bias is not None:
        ln.bias = m.bias
    from rpn2c.frontends.convert_layers import layer_norm

    return layer_norm(ln, Context(ctx.builder, ln, ctx.path, [ctx.arg(0)], {}, ctx.call, ctx.name("ln")))


def register_all() -> None:
    from torch_geometric.nn import (
        ChebConv, GATConv, GATv2Conv, GCNConv, GINConv, GraphConv, SAGEConv, TransformerConv,
    )
    from torch_geometric.nn.dense.linear import Linear
    from torch_geometric.nn.norm import BatchNorm, LayerNorm

    from rpn2c.frontends.convert_layers import linear

    register_converter(Linear, linear)  # the same F.linear(x, weight [out, in], bias) as nn.Linear
    register_converter(BatchNorm, pyg_batch_norm)
    register_converter(LayerNorm, pyg_layer_norm)

    register_converter(GATv2Conv, gatv2_conv)
    register_converter(TransformerConv, transformer_conv)
    register_converter(GCNConv, gcn_conv)
    register_converter(GATConv, gat_conv)
    register_converter(SAGEConv, sage_conv)
    register_converter(GINConv, gin_conv)
    register_converter(GraphConv, graph_conv)
    register_converter(ChebConv, cheb_conv)
