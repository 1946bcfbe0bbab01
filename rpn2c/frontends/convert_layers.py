"""Converters for torch's feed-forward layers: Linear, convolutions, pooling, normalisation, activations,
dropout, flatten, embedding. Each docstring states the RPN 2 recipe the module becomes."""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.frontends.kit import LENGTH_SYMBOLS, Context, Value, lit, per_axis, register_converter


def _tuple(v, rank: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * rank


def _bias_text(has_bias: bool) -> str:
    return "a tied bias b (one per output feature, added after ψ)" if has_bias else "no bias"


# ------------------------------------------------------------------------------------------------ linear
def linear(m: nn.Linear, ctx: Context) -> Value:
    """nn.Linear = a perceptron head (RPN v1): ξ none, κ identity, ψ identity (W), tied bias, π zero; on a
    sequence it acts on every item alone (no instance ξ). Also torch_geometric's ``Linear`` (in_channels ->
    out_channels, the same ``F.linear``)."""
    x = ctx.features_input(ctx.arg(0))
    n_in = m.in_features if hasattr(m, "in_features") else m.in_channels
    n_out = m.out_features if hasattr(m, "out_features") else m.out_channels
    if x.features != n_in:
        ctx.fail(None, f"in_features={n_in} but the input has {x.features} features")
    name = ctx.name("fc")
    on = "every item of a sequence alone (no instance ξ)" if x.kind == "items" else "a feature vector"
    comment = [f"{ctx.where()}({n_in} -> {n_out}) on {on}: a perceptron head (RPN v1):",
               f"  ξ none, κ identity, ψ identity = W [{n_out}, {n_in}],",
               f"  {_bias_text(m.bias is not None)}, π zero"]
    y = ctx.head(x, [f"out = {n_out}", "" if m.bias is not None else "bias = false"], comment=comment,
                 name=name)
    ctx.param(f"{name}.psi.weight", "weight")
    if m.bias is not None:
        ctx.param(f"{name}.bias", "bias")
    return y


# ------------------------------------------------------------------------------------------------ convolution
def conv(m: nn.Conv1d, ctx: Context) -> Value:
    """nn.ConvNd = a head with a grid-patch attribute ξ in padding mode (x·A is im2col), κ identity, ψ identity
    (the kernel reshaped to [C_out, C_in/g · Πk], block-diagonal over g groups), a tied per-channel bias, π zero."""
    rank = len(m.kernel_size)
    x = ctx.grid_input(ctx.arg(0), rank)
    if x.features != m.in_channels:
        ctx.fail(None, f"in_channels={m.in_channels} but the input has {x.features} channels")
    args = [f"size = {per_axis(m.kernel_size)}"]
    if any(s != 1 for s in m.stride):
        args.append(f"stride = {per_axis(m.stride)}")
    if isinstance(m.padding, str):
        if m.padding == "same":
            args.append('pad = "same"')
        elif m.padding != "valid":
            ctx.fail(f"padding={m.padding!r}")
    elif any(p != 0 for p in m.padding):
        args.append(f"pad = {per_axis(m.padding)}")
    if any(d != 1 for d in m.dilation):
        args.append(f"dilation = {per_axis(m.dilation)}")
    if m.padding_mode not in ("zeros", "circular", "reflect", "replicate"):
        ctx.fail(f"padding_mode={m.padding_mode!r}")
    if m.padding_mode != "zeros":
        args.append(f"padding_mode = {lit(m.padding_mode)}")
    name = ctx.name("conv")
    per_group = m.in_channels // m.groups
    taps = 1
    for k in m.kernel_size:
        taps *= k
    settings = [f"xi_attribute = grid_patch({', '.join(args)})", f"out = {m.out_channels}"]
    if m.groups > 1:
        settings.append(f"groups = {m.groups}")
    if m.bias is None:
        settings.append("bias = false")
    psi = f"ψ identity = the kernel as [{m.out_channels}, {per_group}·{taps}] ((channel, tap) order)"
    if m.groups > 1:
        psi += f", block-diagonal over {m.groups} channel groups"
    comment = [f"{ctx.where()}({m.in_channels} -> {m.out_channels}, kernel {tuple(m.kernel_size)}):",
               "  a convolution head:",
               f"  ξ_attribute = grid_patch ({m.padding_mode} padding; x·A is im2col), κ identity, {psi},",
               f"  {_bias_text(m.bias is not None)}, π zero"]
    y = ctx.head(x, settings, comment=comment, name=name)
    ctx.param(f"{name}.psi.weight", "weight", shape=(m.out_channels, per_group * taps))
    if m.bias is not None:
        ctx.param(f"{name}.bias", "bias")
    return y


# ------------------------------------------------------------------------------------------------ pooling
def _pool_extent(length, k, s, p, d, ceil):
    num = length + 2 * p - d * (k - 1) - 1
    if not ceil:
        return num // s + 1
    out = -(-num // s) + 1
    if (out - 1) * s >= length + p:
        out -= 1
    return out


def _pool(m, ctx: Context, rank: int, how: str, kernel, stride, padding, dilation, ceil_mode,
          count_include_pad=True) -> Value:
    x = ctx.grid_input(ctx.arg(0), rank)
    k, p, d = _tuple(kernel, rank), _tuple(padding, rank), _tuple(dilation, rank)
    s = _tuple(stride, rank) if stride is not None and stride != () and stride != [] else k
    spatial = x.shape[2:]
    if all(kk == L and pp == 0 and dd == 1 for kk, L, pp, dd in zip(k, spatial, p, d)):
        # one window over the whole grid (F.max_pool1d(c, c.shape[2]): max over time): global pooling, which holds
        # for every grid size, not only the example's
        comment = [f"{ctx.where()}(kernel {k} = the whole grid {list(spatial)}): global pooling is a compression "
                   f"head: κ = adaptive_pool(size = 1) ({how} over every position), ψ = eye, no bias, π zero"]
        return ctx.head(x, [f"kappa = adaptive_pool(size = 1, metric = {lit(how)})"], comment=comment,
                        kind="compress", name=ctx.name("pool"))
    # ceil_mode matters only where it adds a partial last window; its taps past the padded grid are skipped
    ceil = ceil_mode and any(_pool_extent(L, *a, True) != _pool_extent(L, *a, False)
                             for L, a in zip(spatial, zip(k, s, p, d)))
    args = [f"size = {per_axis(k)}"]
    if s != k:
        args.append(f"stride = {per_axis(s)}")
    if any(p):
        args.append(f"pad = {per_axis(p)}")
    if any(di != 1 for di in d):
        args.append(f"dilation = {per_axis(d)}")
    ignore = how == "mean" and not count_include_pad and any(p)
    if ignore:
        args.append('outside = "ignore"')
    if ceil:
        args.append("ceil_mode = true")
    kappa = "patch_max" if how == "max" else "patch_mean"
    name = ctx.name("pool")
    what = ("max over the patch, out-of-grid taps ignored" if how == "max" else
            "mean over the patch, zero padding not counted (count_include_pad=False)" if ignore else
            "mean over the patch, zero padding counted (count_include_pad)")
    comment = [f"{ctx.where()}(kernel {k}, stride {s}, padding {p}): pooling is a compression head:",
               f"  κ = {kappa} ({what}), ξ none, ψ = eye (no parameters), no bias, π zero"]
    if ceil:
        comment.append(f"  ceil_mode: on {list(spatial)} a partial last window is added; its taps past the "
                       "padded grid are skipped")
    return ctx.head(x, [f"kappa = {kappa}({', '.join(args)})"], comment=comment, kind="compress", name=name)


def _length_symbol(ctx: Context, x: Value) -> str:
    """The sequence-length symbol of a new token input: T, or the next free one (S, U, ...) when another input
    already holds T with another example length (a translation model's source and target)."""
    taken = {sym: inp.example.shape[axis] for inp in ctx.builder.inputs for axis, sym in inp.item_dims.items()
             if sym is not None}
    length = x.shape[1]
    for sym in LENGTH_SYMBOLS:
        if taken.get(sym, length) == length:
            return sym
    return "T"


def max_pool(m, ctx: Context) -> Value:
    """nn.MaxPoolNd = a compression head: κ = patch_max (ceil_mode kept), ψ = eye."""
    if m.return_indices:
        ctx.fail("return_indices=True")
    rank = int(type(m).__name__[-2])
    return _pool(m, ctx, rank, "max", m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)


def avg_pool(m, ctx: Context) -> Value:
    """nn.AvgPoolNd = a compression head: κ = patch_mean (count_include_pad=False: out-of-grid taps ignored;
    ceil_mode kept), ψ = eye."""
    rank = int(type(m).__name__[-2])
    if getattr(m, "divisor_override", None) is not None:
        ctx.fail(f"divisor_override={m.divisor_override}", "patch_mean divides by the taps it reads")
    return _pool(m, ctx, rank, "mean", m.kernel_size, m.stride, m.padding, 1, m.ceil_mode, m.count_include_pad)


def adaptive_pool(m, ctx: Context) -> Value:
    """nn.AdaptiveAvg/MaxPoolNd: an output size dividing the input = a patch compression with kernel = stride
    = L / out (global pooling for out = 1); any other size = κ adaptive_pool (torch's unequal, overlapping bins)."""
    if getattr(m, "return_indices", False):
        ctx.fail("return_indices=True")
    rank = int(type(m).__name__[-2])
    x = ctx.grid_input(ctx.arg(0), rank)
    spatial = x.shape[2:]
    out = _tuple(m.output_size, rank)
    out = tuple(L if o is None else o for L, o in zip(spatial, out))
    how = "max" if "Max" in type(m).__name__ else "mean"
    if all(L % o == 0 for L, o in zip(spatial, out)):
        kernel = tuple(L // o for L, o in zip(spatial, out))
        return _pool(m, ctx, rank, how, kernel, kernel, 0, 1, False)
    name = ctx.name("pool")
    comment = [f"{ctx.where()}(output {out}) on {list(spatial)}: adaptive pooling is a compression head:",
               f"  κ = adaptive_pool ({how} over bins [floor(i·L/S), ceil((i+1)·L/S)) per axis, unequal and "
               "overlapping), ξ none, ψ = eye (no parameters), no bias, π zero"]
    return ctx.head(x, [f"kappa = adaptive_pool(size = {per_axis(out)}, metric = {lit(how)})"], comment=comment,
                    kind="compress", name=name)


# ------------------------------------------------------------------------------------------------ processing
_SIMPLE = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid", nn.SiLU: "silu", nn.ReLU6: "relu6",
           nn.Hardsigmoid: "hardsigmoid", nn.Hardswish: "hardswish", nn.SELU: "selu", nn.Mish: "mish",
           nn.Softsign: "softsign", nn.Tanhshrink: "tanhshrink", nn.LogSigmoid: "log_sigmoid"}

# module class -> (processing name, [(hyper-parameter, torch attribute, default)]): defaults are left out of the spec
_WITH_HP = {
    nn.GELU: ("gelu", [("approximate", "approximate", "none")]),
    nn.ELU: ("elu", [("alpha", "alpha", 1.0)]),
    nn.CELU: ("celu", [("alpha", "alpha", 1.0)]),
    nn.LeakyReLU: ("leaky_relu", [("negative_slope", "negative_slope", 0.01)]),
    nn.Softplus: ("softplus", [("beta", "beta", 1.0), ("threshold", "threshold", 20.0)]),
    nn.Hardtanh: ("hardtanh", [("min_val", "min_val", -1.0), ("max_val", "max_val", 1.0)]),
    nn.Hardshrink: ("hardshrink", [("lambd", "lambd", 0.5)]),
    nn.Softshrink: ("softshrink", [("lambd", "lambd", 0.5)]),
    nn.Threshold: ("threshold", [("threshold", "threshold", None), ("value", "value", None)]),
    nn.RReLU: ("rrelu", [("lower", "lower", 1 / 8), ("upper", "upper", 1 / 3)]),
}


def _hp_literal(v):
    return lit(v) if isinstance(v, str) else lit(float(v))


def activation(m: nn.Module, ctx: Context) -> Value:
    """Activations = output processing of the preceding head (``post = [...]``), or a processing op; their
    parameters (slopes, bounds, alpha, beta, lambd) become the processing function's hyper-parameters."""
    x = ctx.arg(0)
    cls = next(c for c in type(m).__mro__ if c in _SIMPLE or c in _WITH_HP)
    if cls in _SIMPLE:
        y, _ = ctx.process(x, _SIMPLE[cls], comment="an activation is output processing")
        return y
    fn, table = _WITH_HP[cls]
    values = {hp: getattr(m, attr) for hp, attr, _ in table}
    kwargs = ", ".join(f"{hp} = {_hp_literal(values[hp])}" for hp, _, default in table
                       if default is None or values[hp] != default)
    y, _ = ctx.process(x, fn, kwargs, comment="an activation is output processing")
    return y


def prelu(m: nn.PReLU, ctx: Context) -> Value:
    """nn.PReLU = prelu processing with its learned slope(s) a: one shared, or one per channel (axis 1 in torch:
    the features of a vector, the channels of a grid)."""
    x = ctx.arg(0)
    n = m.num_parameters
    if n > 1:
        if x.kind is None and len(x.shape) >= 3:
            ctx.grid_input(x, len(x.shape) - 2)  # torch slopes axis 1: the channels
        elif x.kind is None:
            ctx.features_input(x)
        if x.kind == "items" or x.kind not in ("vector", "grid") or x.shape[1] != n:
            ctx.fail(f"num_parameters={n}", f"torch slopes axis 1 of {list(x.shape)}; prelu slopes the features "
                                            "of a vector or the channels of a grid")
    kwargs = f"num_parameters = {n}" if n > 1 else ""
    y, prefix = ctx.process(x, "prelu", kwargs, comment="a learned slope for x < 0")
    ctx.param(f"{prefix}.weight", "weight")
    return y


def _on_features(ctx: Context, x: Value, dim: int, what: str) -> Value:
    """``x`` typed so that torch's axis ``dim`` is its feature axis (the channels of a grid), else a located error."""
    nd = len(x.shape)
    d = dim % nd
    if x.kind is None:
        if nd == 2 and d == 1 or nd == 3 and d == 2:
            ctx.features_input(x)
        elif nd >= 3 and d == 1:
            ctx.grid_input(x, nd - 2)
    feature_axis = {"vector": 1, "items": nd - 1, "grid": 1}.get(x.kind)
    if d != feature_axis:
        ctx.fail(f"dim={dim}", f"{what} acts on the feature axis ({feature_axis} of a {x.kind} value "
                               f"{list(x.shape)})")
    return x


_SOFTMAX = {nn.Softmax: "softmax", nn.LogSoftmax: "log_softmax", nn.Softmin: "softmin"}


def softmax(m, ctx: Context) -> Value:
    """nn.Softmax/LogSoftmax/Softmin over the feature axis = softmax/log_softmax/softmin processing (softmin(x) =
    softmax(−x))."""
    x = ctx.arg(0)
    fn = _SOFTMAX[next(c for c in type(m).__mro__ if c in _SOFTMAX)]
    if m.dim is None:
        ctx.fail("dim=None", "give the dimension explicitly")
    y, _ = ctx.process(_on_features(ctx, x, m.dim, f"{fn} processing"), fn, comment="over the feature axis")
    return y


def glu(m: nn.GLU, ctx: Context) -> Value:
    """nn.GLU(dim) = a ⊙ σ(b) for the halves a, b of the feature axis: two slice_features, sigmoid, and mul (a gate
    is a Hadamard product)."""
    x = _on_features(ctx, ctx.arg(0), m.dim, "GLU")
    if x.features % 2:
        ctx.fail(f"dim={m.dim}", f"GLU halves the feature axis; {x.features} features is odd")
    h = x.features // 2
    shape = ctx.output_shape
    a = ctx.op("slice_features", [x], f"start = 0, stop = {h}", prefix="glu_a", shape=shape,
               comment=f"{ctx.where()}(dim={m.dim}): a ⊙ σ(b), a = features [0:{h}]")
    b = ctx.op("slice_features", [x], f"start = {h}", prefix="glu_b", shape=shape,
               comment=f"  b = features [{h}:{2 * h}]")
    g = ctx.op("sigmoid", [b], prefix="glu_gate", shape=shape, comment="  the gate σ(b)")
    return ctx.op("mul", [a, g], prefix="glu", shape=shape, comment="  the gate is a Hadamard product")


def dropout(m: nn.Dropout, ctx: Context) -> Value:
    """nn.Dropout = dropout processing (identity in eval mode)."""
    x = ctx.arg(0)
    if m.p >= 1.0:
        ctx.builder.notes.append(f"{ctx.where()}(p={m.p}) is omitted: identity in eval mode, and dropout(p) needs "
                                 "p < 1")
        return x
    y, _ = ctx.process(x, "dropout", f"p = {lit(float(m.p))}", comment="identity in eval mode")
    return y


def layer_norm(m: nn.LayerNorm, ctx: Context) -> Value:
    """nn.LayerNorm over the feature axis (or the whole [C, *S] of a grid) = layer_norm processing."""
    x = ctx.arg(0)
    shape = tuple(m.normalized_shape)
    if x.kind is None:
        nd = len(x.shape)
        if len(shape) == 1 and nd in (2, 3):
            ctx.features_input(x)
        elif nd >= 3 and len(shape) == nd - 1:
            ctx.grid_input(x, nd - 2)
    want = tuple(x.shape[1:]) if x.kind == "grid" else (x.shape[-1],)
    if x.kind not in ("vector", "items", "grid") or shape != want:
        ctx.fail(f"normalized_shape={list(shape)}", f"layer_norm normalises {list(want)} of this {x.kind} value")
    biased = m.elementwise_affine and m.bias is not None
    kwargs = [f"eps = {lit(float(m.eps))}"] + ([] if m.elementwise_affine else ["affine = false"]) + \
        (["bias = false"] if m.elementwise_affine and not biased else [])
    y, prefix = ctx.process(x, "layer_norm", ", ".join(kwargs), comment="normalisation is output processing")
    if m.elementwise_affine:
        ctx.param(f"{prefix}.weight", "weight")
    if biased:
        ctx.param(f"{prefix}.bias", "bias")
    return y


def batch_norm(m, ctx: Context) -> Value:
    """nn.BatchNormNd (eval: running statistics) = batch_norm processing per feature / per channel."""
    x = ctx.arg(0)
    rank = int(type(m).__name__[-2])
    if not m.track_running_stats:
        ctx.fail("track_running_stats=False", "eval mode would use batch statistics; batch_norm keeps running ones")
    if m.momentum is None:
        ctx.fail("momentum=None", "the cumulative moving average has no batch_norm setting")
    if rank == 1 and (x.kind == "vector" or (x.kind is None and len(x.shape) == 2)):
        ctx.features_input(x, allow=("vector",))
    elif rank == 1 and x.kind == "items" and not x.batched:
        pass  # one graph's nodes [N, F]: torch normalises each feature over the nodes, as batch_norm on items does
    elif rank == 1:
        if x.kind == "items":
            ctx.fail(None, "BatchNorm1d on [B, T, F] normalises axis 1 (T), not the features")
        ctx.grid_input(x, 1)
    else:
        ctx.grid_input(x, rank)
    if x.features != m.num_features:
        ctx.fail(f"num_features={m.num_features}", f"the input has {x.features} features/channels")
    kwargs = [f"eps = {lit(float(m.eps))}"]
    if m.momentum != 0.1:
        kwargs.append(f"momentum = {lit(float(m.momentum))}")
    if not m.affine:
        kwargs.append("affine = false")
    y, prefix = ctx.process(x, "batch_norm", ", ".join(kwargs),
                            comment="normalisation is output processing (running statistics in eval)")
    names = (["weight", "bias"] if m.affine else []) + ["running_mean", "running_var", "num_batches_tracked"]
    for n in names:
        ctx.param(f"{prefix}.bn.{n}", n)
    return y


def flatten(m: nn.Flatten, ctx: Context) -> Value:
    """nn.Flatten(1, -1) = the flatten op (channel-major, as torch)."""
    x = ctx.arg(0)
    if m.start_dim != 1 or m.end_dim != -1:
        ctx.fail(f"start_dim={m.start_dim}, end_dim={m.end_dim}", "only Flatten(1, -1) (the whole sample)")
    if x.kind is None:
        nd = len(x.shape)
        if nd == 2:
            ctx.features_input(x)
        elif 3 <= nd <= 5:
            ctx.grid_input(x, nd - 2)
        else:
            ctx.fail(None, f"an input of shape {list(x.shape)}")
    if x.kind == "vector":
        return x
    if x.kind not in ("items", "grid") or not x.batched:
        ctx.fail(None, f"flatten of a {x.kind} value")
    if x.kind == "items":
        ctx.require_layout(x, False, "input")  # torch flattens [B, T, F]; a time-first value would mix the batch
        ctx.fix_items(x)
    return ctx.op("flatten", [x], comment=f"{ctx.where()}: flatten to a vector (channel-major, as torch)",
                  prefix="flat", kind="vector")


# ------------------------------------------------------------------------------------------------ embedding
def embedding(m: nn.Embedding, ctx: Context) -> Value:
    """nn.Embedding = the embedding op: tokens [B, T] -> sequence [B, T, d], κ one-hot (e_x ∈ R^V), ψ = Wᵀ
    (computed as a row gather), padding_idx kept; max_norm, scale_grad_by_freq and sparse have no RPN 2 form."""
    for option, value in (("max_norm", m.max_norm), ("scale_grad_by_freq", m.scale_grad_by_freq or None),
                          ("sparse", m.sparse or None)):
        if value is not None:
            ctx.fail(f"{option}={value}", "it changes the weights or their gradient outside the model's function")
    x = ctx.arg(0)
    if x.kind is None:
        if len(x.shape) != 2 or x.dtype is None or x.dtype.is_floating_point or x.dtype == torch.bool:
            ctx.fail(None, f"expected batched integer ids [B, T], got {x.dtype} {list(x.shape)}")
        ctx.declare(x, "tokens", "tokens[B, {items}]", item_axis=1, item_symbol=_length_symbol(ctx, x))
    elif x.kind != "tokens":
        ctx.fail(None, f"it reads token ids, got a {x.kind} value {list(x.shape)}")
    kwargs = f"vocab = {m.num_embeddings}, dim = {m.embedding_dim}"
    pad = "" if m.padding_idx is None else f", padding_idx = {m.padding_idx}"
    y = ctx.op("embedding", [x], kwargs + pad, prefix="emb", kind="items", time_major=False,
               comment=[f"{ctx.where()}({m.num_embeddings}, {m.embedding_dim}): y[b, t] = W[x[b, t]],",
                        f"  κ one-hot (e_x ∈ R^{m.num_embeddings}), ψ = Wᵀ, computed as a row gather"
                        + ("" if m.padding_idx is None else f"; row {m.padding_idx} is zero and gets no gradient")])
    ctx.param(f"{y.name}.weight", "weight")
    return y


def register_all() -> None:
    register_converter(nn.Linear, linear)
    register_converter(nn.Embedding, embedding)
    for cls in (nn.Conv1d, nn.Conv2d, nn.Conv3d):
        register_converter(cls, conv)
    for cls in (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d):
        register_converter(cls, max_pool)
    for cls in (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d):
        register_converter(cls, avg_pool)
    for cls in (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool1d,
                nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d):
        register_converter(cls, adaptive_pool)
    for cls in (*_SIMPLE, *_WITH_HP):
        register_converter(cls, activation)
    register_converter(nn.PReLU, prelu)
    register_converter(nn.Softmax, softmax)
    register_converter(nn.LogSoftmax, softmax)
    register_converter(nn.Softmin, softmax)
    register_converter(nn.GLU, glu)
    register_converter(nn.Dropout, dropout)
    register_converter(nn.LayerNorm, layer_norm)
    for cls in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
        register_converter(cls, batch_norm)
    register_converter(nn.Flatten, flatten)
