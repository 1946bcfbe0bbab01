"""A float64 program's ONNX stays float64 throughout: the rewrites :func:`rpn2c.runtime.export_onnx.save_onnx`
applies to a program computing in float64 before the conversion.

- The converter writes a Python number as a float32 constant cast to the tensor's dtype (``2π/P·x`` runs with
  ``2π/P`` rounded to float32, an error of ~1e-8): every number float32 cannot hold exactly becomes a float64 0-d
  tensor (:func:`exact_scalars`), through the overload taking it as a tensor (``pow.Tensor_Scalar`` →
  ``pow.Tensor_Tensor``) or, for an op without one (``softshrink``, ``threshold``), torch's decomposition of it.
- Attention's ``scale`` is a ``float`` the converter also writes in float32: an inexact one moves onto the query
  (:func:`exact_attention_scale`).
- onnxruntime has CPU kernels in float32 only for some activations (Softplus, Selu, Elu, Celu, HardSigmoid,
  HardSwish, Mish, Gelu, LeakyRelu, PRelu) and functions (Sinh, Cosh, Tan, Asinh, Acosh, Atanh), its float64
  LayerNormalization is off by ~1e-9 and the converter's sinc multiplies by a float32 π: in float64 they go out as
  arithmetic (:func:`activations`). Erf (the exact GELU's), Atan, Asin and Acos have no float64 kernel at all: they
  go out as Cephes' rational approximations (about 1e-16 relative); a convolution (no float64 Conv) as one matrix
  product per kernel tap (:func:`_conv`). An operator onnxruntime still lacks is refused,
  naming it, when onnxruntime loads the file.
"""

from __future__ import annotations

import struct

# activations written out as torch's own decompositions in float64
_DECOMPOSED = ("softplus", "selu", "elu", "celu", "hardsigmoid", "hardswish", "mish", "gelu", "leaky_relu",
               "_prelu_kernel", "native_layer_norm")


def _in_float64(fn):
    """``fn`` applied to a float64 first argument only (the float32 translation is kept: one ONNX node)."""
    import torch

    def run(x, *args, **kwargs):
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float64:
            return NotImplemented
        return fn(x, *args, **kwargs)
    return run


def _sinh(x):
    """sinh x = (eˣ − e⁻ˣ)/2."""
    return (x.exp() - (-x).exp()) / 2


def _cosh(x):
    """cosh x = (eˣ + e⁻ˣ)/2."""
    return (x.exp() + (-x).exp()) / 2


def _tan(x):
    """tan x = sin x / cos x."""
    return x.sin() / x.cos()


def _asinh(x):
    """asinh x = sign(x)·log(|x| + √(x² + 1)) (odd: no cancellation for x < 0)."""
    a = x.abs()
    return x.sign() * (a + (a * a + 1).sqrt()).log()


def _acosh(x):
    """acosh x = log(x + √(x² − 1)), x ≥ 1."""
    return (x + (x * x - 1).sqrt()).log()


def _atanh(x):
    """atanh x = ½·log((1 + x)/(1 − x))."""
    return ((1 + x) / (1 - x)).log() / 2


def _sinc(x):
    """sinc x = sin(πx)/(πx), 1 at 0 (the converter's Sinc multiplies by a float32 π)."""
    import math

    import torch

    px = x * math.pi
    return torch.where(x == 0, torch.ones_like(x), px.sin() / px)


# Cephes' rational approximations of erf (|x| <= 1) and erfc (1 < |x| < 8, |x| >= 8), highest power first: about
# 1e-16 relative error in float64 (S. L. Moshier, Cephes Math Library, ndtr.c; the forms scipy's erf compiles)
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3, 7.00332514112805075473e3,
          5.55923013010394962768e4)
_ERF_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0, 4.86371970985681366614e1,
           1.96520832956077098242e2, 5.26445194995477358631e2, 9.34528527171957607540e2, 1.02755188689515710272e3,
           5.57535335369399327526e2)
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3, 1.65666309194161350182e3,
           5.57535340817727675546e2)
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0, 6.16021097993053585195e0,
           7.40974269950448939160e0, 2.97886665372100240670e0)
_ERFC_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)


def _poly(x, coefficients):
    """Horner's rule, highest power first."""
    import torch

    out = torch.zeros_like(x) + coefficients[0]
    for c in coefficients[1:]:
        out = out * x + c
    return out


def _erf(x):
    """erf x = x·T(x²)/U(x²) for |x| ≤ 1, else sign(x)·(1 − e^(−x²)·P(|x|)/Q(|x|)) (R/S from |x| = 8): onnxruntime
    has no float64 Erf, and the exact GELU is x·(1 + erf(x/√2))/2. Each branch is evaluated on arguments it can
    take (|x| clamped to 1, and to 30, where e^(−x²) is 0), and NaN stays NaN."""
    import torch

    small = x.clamp(-1.0, 1.0)
    z = small * small
    inner = small * _poly(z, _ERF_T) / _poly(z, _ERF_U)
    a = x.abs().clamp(1.0, 30.0)
    ratio = torch.where(a < 8.0, _poly(a, _ERFC_P) / _poly(a, _ERFC_Q), _poly(a, _ERFC_R) / _poly(a, _ERFC_S))
    outer = x.sign() * (1.0 - (-a * a).exp() * ratio)
    return torch.where(x.abs() <= 1.0, inner, outer)


# Cephes' atan: x + x³·P(x²)/Q(x²) on |x| ≤ 0.66 after reducing by π/4 (up to tan 3π/8) or π/2 (atan.c)
_ATAN_P = (-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1,
           -1.228866684490136173410e2, -6.485021904942025371773e1)
_ATAN_Q = (1.0, 2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
           4.853903996359136964868e2, 1.945506571482613964425e2)
_TAN_3PI_8 = 2.41421356237309504880
_MOREBITS = 6.123233995736765886130e-17  # π/2 − its float64 rounding


def _atan(x):
    """atan x = sign(x)·(y₀ + r + r³·P(r²)/Q(r²)): r = |x| (y₀ = 0) up to 0.66, (|x| − 1)/(|x| + 1) (y₀ = π/4) up
    to tan 3π/8, −1/|x| (y₀ = π/2) beyond; onnxruntime has no float64 Atan."""
    import math

    import torch

    a = x.abs()
    big, mid = a > _TAN_3PI_8, a > 0.66
    r = torch.where(big, -1.0 / a, torch.where(mid, (a - 1.0) / (a + 1.0), a))
    z = r * r
    zero = torch.zeros_like(a)  # the offsets in x's dtype (two Python numbers would make a float32 tensor)
    base = torch.where(big, zero + (math.pi / 2 + _MOREBITS),
                       torch.where(mid, zero + (math.pi / 4 + _MOREBITS / 2), zero))
    return x.sign() * (base + (r + r * z * _poly(z, _ATAN_P) / _poly(z, _ATAN_Q)))


def _asin(x):
    """asin x = atan(x / √((1 − x)(1 + x))) (±π/2 at ±1, NaN beyond): onnxruntime has no float64 Asin."""
    return _atan(x / ((1.0 - x) * (1.0 + x)).sqrt())


def _acos(x):
    """acos x = 2·atan(√((1 − x)/(1 + x))) (π at −1, NaN beyond ±1): onnxruntime has no float64 Acos."""
    return 2.0 * _atan(((1.0 - x) / (1.0 + x)).sqrt())


def _conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A convolution as the sum over its kernel's taps of a strided slice times that tap's weights (one matrix
    product each): onnxruntime has no float64 Conv. ``y[n, o, p] = b[o] + Σ_tap Σ_c x[n, c, s·p + d·tap − pad]
    · w[o, c, tap]``, channels in ``groups``."""
    import itertools

    import torch

    rank = weight.dim() - 2
    if x.dim() != rank + 2:  # an unbatched input: the model's own layout is kept by the converter's Conv
        return NotImplemented

    def per_axis(v):
        return [v] * rank if isinstance(v, int) else list(v) * (rank if len(v) == 1 else 1)

    stride, padding, dilation = per_axis(stride), per_axis(padding), per_axis(dilation)
    if any(padding):
        x = torch.nn.functional.pad(x, [p for p in reversed(padding) for _ in (0, 1)])
    n, c = x.shape[0], x.shape[1]
    o, k = weight.shape[0], weight.shape[2:]
    out = [(x.shape[2 + i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(rank)]
    grouped = x.reshape(n, groups, c // groups, *x.shape[2:])
    w = weight.reshape(groups, o // groups, c // groups, *k)
    y = None
    for tap in itertools.product(*(range(size) for size in k)):
        index = tuple(slice(t * d, t * d + s * (m - 1) + 1, s) for t, d, s, m in zip(tap, dilation, stride, out))
        taps = grouped[(..., *index)].flatten(3).transpose(2, 3)  # [n, g, positions, c/g]
        part = taps @ w[(..., *tap)].transpose(1, 2)  # [n, g, positions, o/g]: a MatMul, which runs in float64
        y = part if y is None else y + part
    y = y.transpose(2, 3).reshape(n, o, *out)
    if bias is not None:
        y = y + bias.reshape(o, *([1] * rank))
    return y


def _prelu(x, weight):
    """PReLU as torch lays the slopes out (one per channel: axis 1, axis 0 of a vector), then
    ``where(x > 0, x, w·x)`` (torch's own decomposition goes through a prim the converter refuses)."""
    import torch

    if weight.numel() != 1:
        shape = [1] * x.dim()
        shape[1 if x.dim() > 1 else 0] = weight.numel()
        weight = weight.reshape(shape)
    return torch.ops.aten._prelu_kernel.default(x, weight)


def _layer_norm(x, shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """``layer_norm`` through ``native_layer_norm`` (then its decomposition: onnxruntime's float64
    LayerNormalization differs from torch by ~1e-9)."""
    import torch

    return torch.ops.aten.native_layer_norm.default(x, shape, weight, bias, eps)[0]


def activations() -> dict:
    """Decompositions, for float64 inputs only, of each op onnxruntime runs in float32 only."""
    import torch
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    table = get_decompositions([getattr(aten, name).default for name in _DECOMPOSED])
    table.update({aten.prelu.default: _prelu, aten.layer_norm.default: _layer_norm, aten.sinh.default: _sinh, aten.cosh.default: _cosh, aten.tan.default: _tan,
                  aten.asinh.default: _asinh, aten.acosh.default: _acosh, aten.atanh.default: _atanh,
                  aten.sinc.default: _sinc, aten.erf.default: _erf, aten.atan.default: _atan,
                  aten.asin.default: _asin, aten.acos.default: _acos, aten.conv1d.default: _conv,
                  aten.conv2d.default: _conv, aten.conv3d.default: _conv})
    return {op: _in_float64(fn) for op, fn in table.items()}


# ------------------------------------------------------------------------------------------------ numbers
def _inexact(v) -> bool:
    """A Python float that float32 rounds."""
    if not isinstance(v, float) or v != v or v in (float("inf"), float("-inf")):
        return False
    try:
        return struct.unpack("f", struct.pack("f", v))[0] != v
    except OverflowError:
        return True


def _computes_in_float64(args, kwargs) -> bool:
    import torch

    if kwargs.get("dtype") == torch.float64:
        return True
    flat = [a for v in (*args, *kwargs.values()) for a in (v if isinstance(v, (list, tuple)) else (v,))]
    return any(isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in flat)


def _node_is_float64(node) -> bool:
    import torch

    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else (val,)
    return any(isinstance(v, torch.Tensor) and v.dtype == torch.float64 for v in vals) or any(
        isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)
        and a.meta["val"].dtype == torch.float64 for a in node.all_input_nodes)


_TENSOR_TYPES = ("Tensor", "Optional[Tensor]")
_NUMBER_TYPES = (*_TENSOR_TYPES, "number", "Optional[number]")  # a Scalar argument's type is spelt "number"


def _with_tensor(op, name: str):
    """The overload of ``op``'s packet taking argument ``name`` as a tensor, the other arguments alike (or None)."""
    want = {a.name: str(a.type) for a in op._schema.arguments if a.name != name}
    for overload in op._overloadpacket.overloads():
        other = getattr(op._overloadpacket, overload)
        args = {a.name: a for a in other._schema.arguments}
        if other is not op and name in args and str(args[name].type) in _TENSOR_TYPES and \
                {k: str(a.type) for k, a in args.items() if k != name} == want and not other._schema.is_mutable:
            return other
    return None


def _bound(op, args, kwargs) -> dict:
    """``op``'s arguments by name."""
    return {a.name: (args[i] if i < len(args) else kwargs[a.name])
            for i, a in enumerate(op._schema.arguments) if i < len(args) or a.name in kwargs}


def _numbers(op, args, kwargs) -> dict:
    """The arguments of ``op`` typed Tensor or Scalar that are Python numbers: the ones the converter turns into
    constants (a ``float`` argument such as an epsilon is an attribute of the ONNX operator, not a constant)."""
    types = {a.name: str(a.type) for a in op._schema.arguments}
    return {k: v for k, v in _bound(op, args, kwargs).items()
            if isinstance(v, (int, float)) and types[k] in _NUMBER_TYPES}


def _float32_parts(v: float) -> list[float]:
    """Numbers float32 holds exactly whose float64 sum is ``v`` (three 24-bit pieces cover 53 bits)."""
    parts = []
    for _ in range(3):
        part = struct.unpack("f", struct.pack("f", v))[0]
        parts.append(part)
        v -= part
    return parts


def _tensor(v: float):
    """``v`` as a float64 0-d tensor the converter keeps exact: the sum of float32-exact parts, each a
    ``scalar_tensor`` (the converter writes a lone number as a float32 constant, so only such parts survive)."""
    import torch

    first, *rest = (torch.ops.aten.scalar_tensor.default(p, dtype=torch.float64) for p in _float32_parts(v) if p)
    for part in rest:
        first = first + part
    return first


def _exact(op):
    """``op`` computing in float64 with each inexact number as a float64 0-d tensor: a tensor argument takes the
    tensor, a Scalar one moves to the overload taking a tensor, else torch's decomposition spells ``op`` out."""
    from torch._decomp import get_decompositions

    schema = op._schema.arguments
    fallback = get_decompositions([op]).get(op)

    def run(*args, **kwargs):
        if not _computes_in_float64(args, kwargs):
            return NotImplemented
        bound = _bound(op, args, kwargs)
        numbers = _numbers(op, args, kwargs)
        target, changed = op, {}
        for a in schema:
            if not _inexact(numbers.get(a.name)):
                continue
            if str(a.type) not in _TENSOR_TYPES:
                other = _with_tensor(target, a.name)
                if other is None:
                    return fallback(*args, **kwargs) if fallback is not None else NotImplemented
                target = other
            changed[a.name] = _tensor(numbers[a.name])
        if not changed:
            return NotImplemented
        bound.update(changed)
        order = target._schema.arguments
        return target(*(bound[a.name] for a in order if not a.kwarg_only and a.name in bound),
                      **{a.name: bound[a.name] for a in order if a.kwarg_only and a.name in bound})
    return run


def _rounded_ops(program) -> set:
    """The ops of ``program`` computing in float64 with a number float32 cannot hold."""
    import torch

    found = set()
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if any(_inexact(v) for v in _numbers(node.target, node.args, node.kwargs).values()) and \
                _node_is_float64(node):
            found.add(node.target)
    return found


def exact_attention_scale(query, scale):
    """``(query, scale)`` for ``scaled_dot_product_attention`` in float64: softmax(q kᵀ·s) v = softmax((s·q) kᵀ) v,
    so a scale ``s`` float32 would round moves onto the query as a float64 tensor and the scale becomes 1 (the
    converter writes the scale, a ``float`` argument, as a float32 constant: √s off by ~1e-9)."""
    import torch

    if query.dtype != torch.float64 or not _inexact(scale):
        return query, scale
    return query * _tensor(scale), 1.0


def exact_scalars(program, rounds: int = 4):
    """``program`` with every number of a float64 op that float32 would round made a float64 tensor (a
    decomposition may bring new numbers: repeated while some remain, at most ``rounds`` times)."""
    for _ in range(rounds):
        ops = _rounded_ops(program)
        if not ops:
            break
        program = program.run_decompositions({op: _exact(op) for op in ops})
    return program
