"""The sparse-matrix view of a layer (seed 004): the layer as one matrix ``vec(y) = M·vec(u) + b``.

``u`` is the layer's input ``x`` of one sample, flattened row-major (grids channel-first: index ``c·N + n``), and
``y`` the layer's output before its output processing ``post`` (an element-wise activation or a norm applied to
``M·vec(x) + b``). ``M`` is assembled from the layer's own parameters and the literal structural matrices of the
reference lowering (``lower/reference.py``: the grid padding matrix, ψ materialised block-diagonally, each ξ
module's ``matrix``), never by differentiating the layer:

- items head ``Y = A_i A_p Z A_a A_ap Ψᵀ + b`` (κ = identity): ``M = (A_i A_p) ⊗ (Ψ A_apᵀ A_aᵀ)``, since
  ``vec(L Z R) = (L ⊗ Rᵀ) vec(Z)`` row-major. A perceptron is ``M = Ψ = W``; a graph convolution
  ``M = Â ⊗ Wᵀ`` (the paper's ``W ∈ R^{D×n}``, so ``Wᵀ = Ψ``); a chain ξ the block lower-triangular
  ``A_chain ⊗ Ψ``; attention ``M(X) = Σ_h 𝒯[h] ⊗ (W_o,h Ψ_h)`` with the data-dependent third-order tensor
  ``𝒯[h, i, j] = softmax(q_i k_jᵀ/√d)`` for the given input (the layer is linear in X once 𝒯 is fixed).
- grid head (a convolution): ``M[(o, q), (c, n)] = Σ_j Ψ[o, c·p + j] A[n, q·p + j]`` with ``A`` the padding
  matrix (one-hot per patch tap): the banded block-Toeplitz matrix of any stride, padding, dilation, groups.
- pooling κ: ``I_C ⊗ S`` with ``S[q, n] = (1/p) Σ_j A[n, q·p + j]`` for mean (sum without 1/p); for max/min the
  input-dependent selection matrix (row q one-hot at the patch cell that wins, zero when a padded zero wins).
- a non-identity κ (an expansion) is not linear: ``u`` is then ``vec(κ(x))`` (followed by ``vec(x)`` when π is
  non-zero), so the matrix acts on the lifted data.
- π adds ``I`` (identity) or ``I_N ⊗ W_π`` (linear); linear head fusions (concat, sum, mean, concat_linear)
  combine the heads' matrices ``Σ_h (I_N ⊗ F_hᵀ) M_h``.
- recurrent layers: ``rpn2c.runtime.recurrence_matrix`` (the unrolled linear recurrence, or the gated cells'
  pre-activations over time).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from rpn2c.components.xi import aggregation_matrix, padding_matrix
from rpn2c.errors import did_you_mean
from rpn2c.ir.graph import Graph, head_slots, slots_before
from rpn2c.lower import reference as literal
from rpn2c.lower.emitters import own_aux
from rpn2c.runtime.matrix_view import MAX_ENTRIES, LayerMatrix, ViewError, _eye, _kron, _room
from rpn2c.train.interdependence import in_eval_mode, layer_call, layer_module


# ------------------------------------------------------------------------------------------------ entry point
def matrix_layers(graph: Graph) -> list[str]:
    """Ids of the nodes that have a matrix view: head layers (incl. pooling) and recurrent layers."""
    return [n.id for n in graph.nodes() if n.kind in ("layer", "recurrent")]


def check_matrix_layer(graph: Graph, name: str) -> None:
    """ViewError unless ``name`` is a layer (did-you-mean otherwise)."""
    layers = matrix_layers(graph)
    if name in layers:
        return
    ids = [n.id for n in graph.nodes()]
    if name in ids:
        kind = graph.node(name).kind
        raise ViewError(f"'{name}' is {'an' if kind[0] in 'aeiou' else 'a'} {kind} node of model '{graph.name}', "
                        f"not a head layer (layers: {', '.join(layers)})")
    hint = did_you_mean(name, layers)
    raise ViewError(f"model '{graph.name}' has no layer '{name}'" + (f"; {hint}" if hint else "")
                    + f" (layers: {', '.join(layers) or 'none'})")


@torch.no_grad()
@in_eval_mode
def layer_matrix(model: nn.Module, layer: str, inputs: dict[str, torch.Tensor], *, sample: int = 0) -> LayerMatrix:
    """The matrix view of ``layer`` of a compiled ``model`` (either lowering), run on ``inputs`` in float64 in eval
    mode; data-dependent parts (attention, max pooling) are those of sample ``sample`` of the batch."""
    graph: Graph = model.graph
    check_matrix_layer(graph, layer)
    if any(p.dtype != torch.float64 for p in model.parameters()):
        model = copy.deepcopy(model).double()
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    module = layer_module(model, layer)
    args, out = layer_call(model, module, inputs)
    x = args[0].double()
    entries = x[0].numel() * out[0].numel()
    if entries > MAX_ENTRIES:
        raise ViewError(f"layer '{layer}': its matrix would have {x[0].numel():,} × {out[0].numel():,} entries "
                        f"(at most {MAX_ENTRIES:,}); use a smaller input (e.g. fewer steps or a smaller grid)")
    if graph.node(layer).kind == "recurrent":
        from rpn2c.runtime.recurrence_matrix import recurrent_matrix

        view = recurrent_matrix(layer, module, x, args[1:], sample)
        view.structure = _structure(view)
        return view
    spec = graph.node(layer).layer
    return _head_layer(layer, spec, module, x, args[1] if len(args) > 1 else None, (args + (None, None))[2] or {},
                       sample)


# ------------------------------------------------------------------------------------------------ head layers
def _head_layer(name, spec, module, x, context, aux, sample) -> LayerMatrix:
    """``fuse_h(M_h) + π``: every head's matrix, the linear head fusion, the remainder."""
    if len(module.pre) and module.pi is not None:
        raise ViewError(f"layer '{name}' has input processing and a remainder: it is not one map of one input")
    raw = x
    for p in module.pre:  # the matrix then acts on pre(x)
        x = p(x)
    data = context.double() if context is not None else x
    module.bind_views()  # packed attention heads: each head's tensors as views
    holders = module._holders()
    grid_out = module.out_kind == "grid"
    maps = [_head(name, hd, x, data, aux, sample) for hd in holders]
    kinds = {m.kind for m in maps}
    if module.fusion is not None:
        if any(not torch.equal(m.u, maps[0].u) for m in maps):
            raise ViewError(f"layer '{name}': its heads read different expansions of the input")
        mat, bias, out_shape = _fuse(name, module.fusion, [m.matrix for m in maps], [m.bias for m in maps],
                                     [m.out_shape for m in maps], grid_out, spec.fusion.component.name)
        factors = {}
        for hd_name, m in zip([h.name for h in spec.heads], maps):
            factors.update({f"{hd_name}.{k}": v for k, v in m.factors.items()})
        head = LayerMatrix(name, maps[0].kind if len(kinds) == 1 else "heads", mat, bias, maps[0].u,
                           maps[0].in_shape, out_shape, maps[0].meaning, any(m.data_dependent for m in maps),
                           factors, layout=maps[0].layout)
    else:
        head = maps[0]
    if module.pi is not None:
        head = _add_remainder(name, module, head, raw[sample], grid_out)
    if head.kind == "attention" and all("attention" in m.factors for m in maps):
        head.factors["tensor"] = torch.stack([m.factors["attention"] for m in maps])  # 𝒯 [H, N, N]
        if module.fusion is not None and not any("xi_attribute" in hd.spec.xi for hd in holders):
            widths = [m.out_shape[-1] for m in maps]
            fs, _ = _fusion_maps(name, module.fusion, spec.fusion.component.name, widths)
            # M = Σ_h 𝒯[h] ⊗ V[h] (+ π), V[h] = F_hᵀ Ψ_h: the values, then the head's share of the fusion
            head.factors["value_output"] = torch.stack([f.T @ m.factors["psi"] for f, m in zip(fs, maps)])
    head.structure = _structure(head)
    return head


def _head(name, hd, x, data, aux, sample) -> LayerMatrix:
    """One head: pooling, a grid head or an items head, its channels fused."""
    t = hd.trace
    if t.grid_kappa:  # pooling, the patches gathered as channels (a patch expansion), or an elementwise κ
        view = (_adaptive_pooling if hasattr(hd.kappa, "size") and hasattr(hd.kappa, "metric") else
                _pooling if hasattr(hd.kappa, "metric") else _patches if hasattr(hd.kappa, "geo") else _lifted)
        return view(name, hd.kappa, data[sample])
    maps = [_grid_channel(name, hd, c, data[sample]) if t.view == "grid" else
            _items_channel(name, hd, c, x, data, aux, sample) for c in range(hd.spec.channels)]
    if len(maps) == 1:
        return maps[0]
    mat, bias, out_shape = _fuse(name, hd.channel_fusion, [m.matrix for m in maps], [m.bias for m in maps],
                                 [m.out_shape for m in maps], t.view == "grid", hd.spec.channel_fusion.component.name)
    return LayerMatrix(name, maps[0].kind, mat, bias, maps[0].u, maps[0].in_shape, out_shape, maps[0].meaning,
                       maps[0].data_dependent, maps[0].factors, layout=maps[0].layout)


def _psi_matrix(hd, c) -> torch.Tensor:
    """Ψ ``[n, D]`` literally (block-diagonal for groups): ``reference.reconciliation`` of the identity, transposed."""
    psi = literal.channel(hd.psi, c)
    eye = _eye(psi.matrix().shape[-1] * hd.spec.groups)
    return literal.reconciliation(psi, eye, hd.spec.groups).double().transpose(0, 1)


def _items_channel(name, hd, c, x, data, aux, sample) -> LayerMatrix:
    """``Y = L κ(Z) R + b`` with ``L = A_i A_p`` and ``R = A_a A_ap Ψᵀ``: ``M = L ⊗ Rᵀ``."""
    h, t = hd.spec, hd.trace
    vec = t.view == "vector"
    q = x.unsqueeze(1) if vec else x
    z0 = data.unsqueeze(1) if vec else data
    kappa = h.kappa.component
    if kappa.name != "identity" and slots_before(h):
        raise ViewError(f"layer '{name}': κ = {kappa.name} between interdependence functions is not linear")
    u = (hd.kappa(z0) if kappa.name != "identity" else z0)[sample].double()  # [N, D]
    left = _eye(u.shape[-2])
    right = _eye(u.shape[-1])
    factors, dependent = {}, False
    for slot in head_slots(h):
        m = literal.channel(getattr(hd, slot.name), c)
        attribute = slot.axis == "attribute"
        a = m.matrix(q, z0, own_aux(m, aux), right.shape[-1] if attribute else left.shape[0])
        varies = a.dim() == 3
        a = (a[min(sample, a.shape[0] - 1)] if varies else a).double()
        dependent = dependent or varies
        if attribute:
            right = right @ a
        else:
            left = a @ left
        factors["attention" if varies else slot.name] = a
    psi = _psi_matrix(hd, c)
    right = right @ psi.T
    n_out, n = left.shape[0], right.shape[1]
    bias = torch.zeros(n_out, n, dtype=torch.float64)
    if hd.bias is not None:
        bias = bias + hd.bias.double()
    factors["psi"] = psi
    in_shape = tuple(x.shape[1:]) if kappa.name == "identity" else tuple(u.shape[1 if vec else 0:])
    meaning = ("vec(Y) = (A_i A_p ⊗ Ψ A_apᵀ A_aᵀ) vec(X) + b" if kappa.name == "identity" else
               f"vec(Y) = (L ⊗ Rᵀ) vec(κ(X)) + b, κ = {kappa.name} (u is the expanded input)")
    if dependent:
        meaning += " (for this input: the interdependence matrix depends on X)"
    return LayerMatrix(name, _items_kind(h, dependent), _kron(left, right.T), bias.flatten(), u.flatten(),
                       in_shape, (n,) if vec else (n_out, n), meaning, dependent, factors,
                       layout=("items", n_out, left.shape[1]))


def _items_kind(h, dependent: bool) -> str:
    names = {str(u.component.name) for u in h.xi.values()}
    if not h.xi:
        return "perceptron"
    if dependent:
        return "attention"
    if any(n.startswith("graph") for n in names):
        return "graph convolution"
    if any("chain" in n for n in names):
        return "chain recurrence"
    return "interdependence"


def _grid_channel(name, hd, c, x) -> LayerMatrix:
    """Convolution: ``M[(o, q), (c, n)] = Σ_j Ψ[o, c·p + j] A[n, q·p + j]`` (A the padding matrix); aggregation-mode
    patches (each patch summed): ``M[(o, q), (c, n)] = Ψ[o, c] A[n, q]``."""
    h, geo = hd.spec, hd.trace.geometry
    mode = h.xi["xi_attribute"].component.mode
    if h.kappa.component.name != "identity":
        raise ViewError(f"layer '{name}': a grid head with κ = {h.kappa.component.name} is not linear in the grid")
    cin, spatial = x.shape[0], tuple(int(s) for s in x.shape[1:])
    psi = _psi_matrix(hd, c)  # [n, C·p] (block-diagonal over groups); aggregation: [n, C]
    n = psi.shape[0]
    _room(math.prod(spatial), math.prod(geo.out_spatial(spatial)), geo.patch_size)
    if mode == "padding":
        a = padding_matrix(geo, spatial, torch.float64, x.device)  # [N, P·p]
        a3 = a.unflatten(1, (-1, geo.patch_size))  # [N, P, p]
        m = torch.einsum("ocj,iqj->oqci", psi.unflatten(1, (cin, geo.patch_size)), a3)
        meaning = "vec(Y)[o·P + q] = Σ_{c,j} Ψ[o, c·p + j] A_patch[n, q·p + j] x[c·N + n] + b_o"
    else:
        a = aggregation_matrix(geo, spatial, torch.float64, x.device)  # [N, P]
        m = torch.einsum("oc,iq->oqci", psi, a)
        meaning = "vec(Y)[o·P + q] = Σ_c Ψ[o, c] A_aggregate[n, q] x[c·N + n] + b_o"
    n_cells, n_pos = m.shape[-1], m.shape[1]
    bias = torch.zeros(n, n_pos, dtype=torch.float64)
    if hd.bias is not None:
        bias = bias + (hd.bias.double()[:, None] if h.bias == "tied" else hd.bias.double().T)
    return LayerMatrix(name, "convolution", m.reshape(n * n_pos, cin * n_cells), bias.flatten(), x.flatten(),
                       tuple(x.shape), (n, *geo.out_spatial(spatial)), meaning,
                       factors={"patch_matrix": a, "psi": psi}, layout=("grid", n_pos, n_cells))


def _lifted(name, kappa, x) -> LayerMatrix:
    """An elementwise κ over a grid's channels (ψ = eye): the identity on the lifted input ``u = κ(X)``."""
    u = kappa(x.unsqueeze(0), grid=True)[0].double()
    return LayerMatrix(name, "elementwise κ", _eye(u.numel()), torch.zeros(u.numel(), dtype=torch.float64),
                       u.flatten(), tuple(u.shape), tuple(u.shape),
                       "vec(Y) = vec(κ(X)): κ elementwise over the channels (u is the expanded input)")


def _patches(name, gather, x) -> LayerMatrix:
    """``vec(Y)[(c·p + j)·P + q] = x[c, cell read by tap j of patch q]``: a 0/1 selection (out-of-grid taps read 0)."""
    geo = gather.geo
    spatial = tuple(int(s) for s in x.shape[1:])
    _room(math.prod(spatial), math.prod(geo.out_spatial(spatial)), geo.patch_size)
    a3 = padding_matrix(geo, spatial, torch.float64, x.device).unflatten(1, (-1, geo.patch_size))  # [N, P, p]
    cin, n_cells, n_pos, p = x.shape[0], a3.shape[0], a3.shape[1], geo.patch_size
    _room(cin, p, n_pos, cin, n_cells)
    m = torch.zeros(cin, p, n_pos, cin, n_cells, dtype=torch.float64)
    idx = torch.arange(cin)
    m[idx, :, :, idx, :] = a3.permute(2, 1, 0)
    return LayerMatrix(name, "patch gather", m.reshape(cin * p * n_pos, cin * n_cells),
                       torch.zeros(cin * p * n_pos, dtype=torch.float64), x.flatten(), tuple(x.shape),
                       (cin * p, *geo.out_spatial(spatial)), "vec(Y) = (I_C ⊗ G) vec(X): G[(j, q), n] = 1 where tap j of "
                       "patch q reads cell n (the patches as channels, tap fastest)", factors={"G": a3},
                       layout=("grid", n_pos, n_cells))


def _adaptive_pooling(name, pool, x) -> LayerMatrix:
    """``I_C ⊗ P``: adaptive pooling onto the fixed grid ``pool.size`` (bins of unequal size where the size does not
    divide the grid): P[q, n] = 1/|bin q| for the mean, the input-dependent one-hot of each bin's winner for max."""
    from rpn2c.functional.compression import adaptive_bin_index

    spatial = tuple(int(s) for s in x.shape[1:])
    index = adaptive_bin_index(spatial, pool.size)  # [Q, p], −1 past a bin's end
    cin, n_cells, n_pos = x.shape[0], math.prod(spatial), index.shape[0]
    _room(cin, n_pos, cin, n_cells)
    member = torch.zeros(n_pos, n_cells, dtype=torch.float64)
    rows = torch.arange(n_pos)[:, None].expand_as(index)
    member[rows[index >= 0], index[index >= 0]] = 1.0
    out_shape = (cin, *pool.size)
    if pool.metric == "mean":
        s = member / member.sum(-1, keepdim=True)
        m = _kron(_eye(cin), s)
        return LayerMatrix(name, "adaptive pooling (mean)", m, torch.zeros(len(m), dtype=torch.float64),
                           x.flatten(), tuple(x.shape), out_shape, "vec(Y) = (I_C ⊗ P) vec(X), P[q, n] = 1/|bin q| "
                           "for cell n in bin q", factors={"P": s}, layout=("grid", n_pos, n_cells))
    if pool.metric != "max":
        raise ViewError(f"layer '{name}': adaptive pooling by {pool.metric} is not a matrix")
    flat = x.reshape(cin, n_cells).double()
    score = flat[:, None, :].masked_fill(member[None] == 0, float("-inf"))  # [C, Q, N]
    win = score.argmax(-1)  # [C, Q]: torch's first maximum of each bin
    m = torch.zeros(cin, n_pos, cin, n_cells, dtype=torch.float64)
    c_idx, q_idx = torch.meshgrid(torch.arange(cin), torch.arange(n_pos), indexing="ij")
    m[c_idx, q_idx, c_idx, win] = 1.0
    return LayerMatrix(name, "adaptive pooling (max)", m.reshape(cin * n_pos, cin * n_cells),
                       torch.zeros(cin * n_pos, dtype=torch.float64), x.flatten(), tuple(x.shape), out_shape,
                       "vec(Y) = S(X) vec(X): row (c, q) one-hot at the winning cell of bin q (input-dependent)",
                       data_dependent=True, layout=("grid", n_pos, n_cells))


def _pooling(name, pool, x) -> LayerMatrix:
    """``I_C ⊗ S``: averaging/summing matrix for mean/sum, the input-dependent selection for max/min."""
    geo = pool.taps  # the window cut to the taps that can land in the grid, where the module cuts it
    metric = {"average": "mean", "maximum": "max", "minimum": "min"}.get(pool.metric, pool.metric)
    spatial = tuple(int(s) for s in x.shape[1:])
    _room(math.prod(spatial), math.prod(geo.out_spatial(spatial)), geo.patch_size)
    a3 = padding_matrix(geo, spatial, torch.float64, x.device).unflatten(1, (-1, geo.patch_size))  # [N, P, p]
    cin, n_cells, n_pos = x.shape[0], a3.shape[0], a3.shape[1]
    out_shape = (cin, *geo.out_spatial(spatial))
    if metric in ("mean", "sum"):
        s = a3.sum(-1).T  # [P, N]
        if metric == "mean":
            s = s / (pool.count.double()[:, None] if pool.ignore else pool.geo.patch_size)
        m = _kron(_eye(cin), s)
        return LayerMatrix(name, f"pooling ({metric})", m, torch.zeros(len(m), dtype=torch.float64), x.flatten(),
                           tuple(x.shape), out_shape, "vec(Y) = (I_C ⊗ S) vec(X), S[q, n] = weight of cell n in "
                           "patch q", factors={"S": s}, layout=("grid", n_pos, n_cells))
    if metric not in ("max", "min"):
        raise ViewError(f"layer '{name}': pooling by {metric} is not a matrix")
    taps = torch.einsum("cn,nqj->cqj", x.reshape(cin, n_cells).double(), a3)  # [C, P, p]
    outside = a3.sum(0) == 0  # [P, p]: taps reading padding
    sign = 1.0 if metric == "max" else -1.0
    score = (taps * sign).masked_fill(outside, float("-inf") if pool.ignore else 0.0)
    win = score.argmax(-1)  # [C, P]
    sel = a3.permute(1, 2, 0)[torch.arange(n_pos)[None, :], win]  # [C, P, N]: the winning tap's one-hot row
    _room(cin, n_pos, cin, n_cells)
    m = torch.zeros(cin, n_pos, cin, n_cells, dtype=torch.float64)
    idx = torch.arange(cin)
    m[idx, :, idx, :] = sel
    return LayerMatrix(name, f"pooling ({metric})", m.reshape(cin * n_pos, cin * n_cells),
                       torch.zeros(cin * n_pos, dtype=torch.float64), x.flatten(), tuple(x.shape), out_shape,
                       "vec(Y) = S(X) vec(X): row (c, q) one-hot at the winning cell of patch q (input-dependent)",
                       data_dependent=True, layout=("grid", n_pos, n_cells))


# ------------------------------------------------------------------------------------------------ fusion, π
def _fusion_maps(name, module, component: str, widths: list[int]):
    """Per input ``F_h [n_h, n]`` and a bias with ``fuse(Y_1..Y_k) = Σ_h Y_h F_h + b`` (linear fusions only)."""
    k, total = len(widths), sum(widths)
    if component in ("sum", "mean"):
        f = _eye(widths[0]) / (k if component == "mean" else 1)
        return [f] * k, None
    if component == "concat":
        return list(_eye(total).split(widths)), None
    if component == "concat_linear":
        w = module.linear.weight.double().T  # [Σ n_h, n]
        return list(w.split(widths)), (module.linear.bias.double() if module.linear.bias is not None else None)
    raise ViewError(f"layer '{name}': fusion '{component}' is not linear")


def _fuse(name, fusion, mats, biases, shapes, grid, component):
    widths = [s[0] if grid else s[-1] for s in shapes]
    fs, fb = _fusion_maps(name, fusion, component, widths)
    rest = shapes[0][1:] if grid else shapes[0][:-1]
    eye = _eye(math.prod(rest))
    lift = [_kron(f.T, eye) if grid else _kron(eye, f.T) for f in fs]
    m = sum(li @ mi for li, mi in zip(lift, mats))
    b = sum(li @ bi for li, bi in zip(lift, biases))
    n = fs[0].shape[1]
    if fb is not None:
        b = b + (_kron(fb, eye.diagonal()) if grid else _kron(eye.diagonal(), fb))
    return m, b, ((n, *rest) if grid else (*rest, n))


def _add_remainder(name, module, head: LayerMatrix, x, grid) -> LayerMatrix:
    """``+ π(x)``: ``I`` (identity) or ``W_π`` per item / cell (linear); a constant only moves the bias."""
    pi = module.pi
    n_in = x.numel()
    if isinstance(pi, nn.Identity):
        p, b = _eye(n_in), None
    elif isinstance(pi, nn.Linear):
        w = pi.weight.double()
        rest = n_in // w.shape[1]
        eye = _eye(rest)
        p = _kron(w, eye) if grid else _kron(eye, w)
        b = None if pi.bias is None else (_kron(pi.bias.double(), eye.diagonal()) if grid else
                                         _kron(eye.diagonal(), pi.bias.double()))
    else:
        raise ViewError(f"layer '{name}': the remainder {type(pi).__name__} is not linear")
    bias = head.bias if b is None else head.bias + b
    if head.u.numel() == n_in and torch.equal(head.u, x.flatten().double()):
        m, u = head.matrix + p, head.u
    else:  # the head reads κ(x): stack the columns, u = [κ(x); x]
        m, u = torch.cat([head.matrix, p], 1), torch.cat([head.u, x.flatten().double()])
        head.layout = ()
        head.meaning += "; u = [vec(κ(x)); vec(x)] (π reads x)"
    head.matrix, head.bias, head.u = m, bias, u
    head.meaning += " + π(x)"
    return head


# ------------------------------------------------------------------------------------------------ structure
def _structure(lm: LayerMatrix) -> dict:
    """What the picture shows: block-Toeplitz / Kronecker factors named per kind."""
    s = {}
    if lm.kind == "convolution":
        s["structure"] = "banded block-Toeplitz (im2col ⊗ kernel)"
    elif lm.kind == "graph convolution":
        s["structure"] = "Kronecker Â ⊗ Wᵀ"
    elif lm.kind == "chain recurrence":
        s["structure"] = "block lower-triangular A_chain ⊗ Ψ (+ I)"
    elif lm.kind == "attention":
        s["structure"] = "Σ_h 𝒯[h] ⊗ (W_o,h Ψ_h) with the data-dependent tensor 𝒯 [H, N, N]"
    elif lm.kind.startswith("pooling"):
        s["structure"] = "I_C ⊗ S (block-diagonal over channels)"
    elif lm.kind == "perceptron":
        s["structure"] = "dense W"
    elif lm.kind.startswith("recurrence"):
        s["structure"] = "block lower-triangular over time (forward), block-Toeplitz"
    return s
