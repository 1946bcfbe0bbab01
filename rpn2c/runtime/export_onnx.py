"""ONNX for ``rpn2c export``: the exported program converted by ``torch.onnx.export(dynamo=True)`` after the
rewrites ONNX needs (attention on 4-d operands, the stable sort as ``TopK``, a remainder by a symbolic size as a
tensor, ``cdist`` as differences; a float64 program float64 throughout, :mod:`rpn2c.runtime.export_float64`), and
the file run in onnxruntime for the check."""

from __future__ import annotations

from pathlib import Path

from rpn2c.runtime.export_base import INSTALL, ExportError, quiet
from rpn2c.runtime.export_float64 import activations, exact_attention_scale, exact_scalars


class MissingPackage(ExportError):
    """A package the format needs is not installed (a usage error: the message says what to install)."""


def require_onnx() -> None:
    """Raise :class:`MissingPackage` unless the ONNX converter's packages are installed."""
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise MissingPackage(f"--format onnx needs onnx and onnxscript: {INSTALL}") from None


def save_onnx(program, path: Path, graph) -> None:
    """Convert ``program`` with ``torch.onnx.export(dynamo=True)``; inputs and outputs keep the spec's names."""
    import torch

    require_onnx()
    with quiet():
        program = program.run_decompositions({torch.ops.aten.scaled_dot_product_attention.default: _sdpa_in_4d,
                                              torch.ops.aten.sort.stable: _sort_by_topk,
                                              torch.ops.aten.remainder.Scalar: _remainder_by_tensor,
                                              torch.ops.aten.cdist.default: _cdist_by_differences,
                                              torch.ops.aten._cdist_forward.default: _cdist_by_differences,
                                              **activations()})
        program = exact_scalars(program)
        onnx_program = torch.onnx.export(program, (), dynamo=True, input_names=list(graph.inputs),
                                         output_names=list(graph.outputs), verbose=False, optimize=False)
        optimize_exactly(onnx_program)
        onnx_program.save(str(path))


def optimize_exactly(onnx_program) -> None:
    """The converter's own graph optimisation (constant folding, fusions) without its no-op rules, which take
    ``x + c`` for ``x`` when ``|c| ≤ 1e-8`` and ``x · c`` when ``|c − 1| ≤ 1e-5``: a LayerNorm's ε = 1e-12 vanished
    (a float64 ViT then differed by 3e-10) and so would a scale of 1.000005. Should onnxscript move its rule table,
    the graph stays as converted (onnxruntime folds constants when it loads the file)."""
    try:
        from onnxscript import rewriter
        from onnxscript.rewriter.rules.common import _no_op
    except ImportError:
        return
    rules = getattr(rewriter, "_DEFAULT_REWRITE_RULES", None)
    if not isinstance(rules, tuple):
        return
    tolerant = {id(rule) for rule in _no_op.rules}
    rewriter._DEFAULT_REWRITE_RULES = tuple(rule for rule in rules if id(rule) not in tolerant)
    try:
        onnx_program.optimize()
    finally:
        rewriter._DEFAULT_REWRITE_RULES = rules


def _sdpa_in_4d(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """ONNX's attention takes 4-d operands only: a 2-d or 3-d ``scaled_dot_product_attention`` (one head, nodes or
    a batch of sequences) on views with leading axes of size 1 (4-d ones trace as they are). A 4-d one with a mask
    per head (a relative position bias ``[·, H, Nq, Nc]``) is written out (:func:`_attention_by_matmuls`): the
    kernel it traced with lays its output out heads-inner, the conversion's own decomposition heads-outer, and
    the views recorded after it fit only the first. In float64 an inexact ``scale`` moves onto the query
    (:func:`~rpn2c.runtime.export_float64.exact_attention_scale`)."""
    import torch

    query, exact = exact_attention_scale(query, scale)
    lift = 4 - query.dim()
    if lift <= 0:
        if attn_mask is None or attn_mask.dim() != 4 or attn_mask.shape[1] == 1:
            if exact == scale:
                return NotImplemented
            return torch.ops.aten.scaled_dot_product_attention.default(query, key, value, attn_mask, dropout_p,
                                                                       is_causal, scale=exact, enable_gqa=enable_gqa)
        return _attention_by_matmuls(query, key, value, attn_mask, exact, enable_gqa)

    def up(t):
        return t if t is None else t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))

    out = torch.ops.aten.scaled_dot_product_attention.default(up(query), up(key), up(value), up(attn_mask),
                                                               dropout_p, is_causal, scale=exact,
                                                               enable_gqa=enable_gqa)
    return out.reshape(out.shape[lift:])


def _attention_by_matmuls(query, key, value, attn_mask, scale, enable_gqa):
    """``softmax(q kᵀ · scale + mask) v`` over ``[B, H, N, ·]`` (keys and values repeated per group with
    ``enable_gqa``; a bool mask keeps where True)."""
    import math

    import torch

    if enable_gqa and key.shape[1] != query.shape[1]:
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    logits = query @ key.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(query.shape[-1]))
    if attn_mask.dtype == torch.bool:
        logits = logits.masked_fill(~attn_mask, float("-inf"))
    else:
        logits = logits + attn_mask
    return torch.softmax(logits, dim=-1) @ value


def _sort_by_topk(x, *, stable=None, dim=-1, descending=False):
    """``sort(stable=True)`` as the plain overload, which ONNX translates to ``TopK``: stable by definition (equal
    values keep their index order), so nothing is lost (the stable overload has no translation)."""
    import torch

    return torch.ops.aten.sort.default(x, dim, descending)


def _remainder_by_tensor(x, other):
    """``x % n`` with ``n`` a symbolic size (a graph's node count): ONNX's translation needs a constant scalar, so
    the divisor becomes a 0-d tensor."""
    import torch

    return torch.ops.aten.remainder.Tensor(x, torch.ops.aten.scalar_tensor.default(other, dtype=x.dtype))


def _cdist_by_differences(x1, x2, p=2.0, compute_mode=None):
    """``torch.cdist`` (ONNX has no translation): ``‖x1_i − x2_j‖_p`` from the broadcast differences
    ``[..., N, M, D]``, exact as the exact mode the kernels ask for (p = 0 counts the differing coordinates)."""
    import torch

    d = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    if p == float("inf"):
        return d.amax(-1)
    if p == 0:
        return (d != 0).to(d.dtype).sum(-1)
    if p == 1:
        return d.sum(-1)
    if p == 2:
        return d.square().sum(-1).sqrt()
    return d.pow(p).sum(-1).pow(1.0 / p)


def onnx_runner(path: Path):
    """A function running the ONNX file in onnxruntime on a tuple of inputs (None when it is not installed)."""
    import torch

    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # its failures come back as exceptions, not as lines on stderr
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(inputs):
        feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
        return tuple(torch.from_numpy(o) for o in session.run(None, feed))
    return run


