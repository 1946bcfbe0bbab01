"""The resource estimates of the check and of the compiled model: activation elements and sequential steps per node,
from the inferred types and shape traces, with the symbolic dimensions counted 1 at check and sized by the inputs at
run time (``rpn2c.check.budget`` holds the budgets and charges them; ``rpn2c.lower.build`` calls
:func:`run_time_check` before a forward pass)."""

from __future__ import annotations

import ast
import math
import re

from rpn2c.errors import Diagnostic, SpecError, error_for
from rpn2c.ir.types import TensorType, numel

BYTES_PER_ELEMENT = 4  # float32


def _sci(n: int) -> str:
    """``n`` (any size) as ``about 1.2e75``, without converting it to a float or a decimal string."""
    shift = max(0, n.bit_length() - 60)
    exp = shift * math.log10(2) + math.log10(n >> shift)
    mantissa, e = round(10 ** (exp % 1), 1), int(exp)
    if mantissa >= 10:
        mantissa, e = mantissa / 10, e + 1
    return f"about {mantissa:g}e{e}"


def human_bytes(n: int) -> str:
    if n >= 2**60:
        return f"{_sci(n)} bytes"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def human_count(n: int) -> str:
    return f"{n:,}" if n < 10**15 else _sci(n)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a // b}


def _arith(e: ast.expr) -> int:
    """An integer expression of +, -, *, // and parentheses (nothing else is evaluated)."""
    if isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return -_arith(e.operand)
    if isinstance(e, ast.BinOp) and type(e.op) in _OPS:
        return _OPS[type(e.op)](_arith(e.left), _arith(e.right))
    raise ValueError("not an integer expression")


def dim_size(d, sizes: dict[str, int] | None = None, least: int = 1) -> int:
    """The size of a dimension: an int is itself; a symbol or an expression of symbols (``T``, ``(T+2)//2+1``)
    takes the symbols' sizes in ``sizes``, any symbol not there counting 1 (as everywhere at check); at least
    ``least``."""
    if isinstance(d, bool) or d is None:
        return least
    if isinstance(d, int):
        return max(d, least)
    if not sizes:
        return max(1, least)
    text = _NAME.sub(lambda m: str(sizes.get(m[0], 1)), str(d))
    try:
        value = _arith(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
        return max(1, least)
    return max(value, least)


def per_sample(t: TensorType | None, sizes: dict[str, int] | None = None) -> int:
    """Elements of one sample of ``t``: the product of its dims after the sample axis, symbols sized by ``sizes``
    (else 1)."""
    if t is None:
        return 0
    return math.prod(dim_size(d, sizes) for d in t.shape[1:])


def head_elements(trace, head, sizes: dict[str, int] | None = None) -> int:
    """The largest per-sample intermediate of one head: κ's input (an image head's patch matrix) and output over
    its items, the N×M matrix of an instance ξ over items (not for a ξ that propagates over an edge list: its
    edge messages are in the scratch) or the M×M' matrix of an attribute ξ; plus what its components make besides
    (``trace.scratch``: inner κ outputs, fabricated ψ matrices, a hybrid's parts)."""
    def k(v):
        return dim_size(v, sizes)

    patches = trace.view == "grid" and not trace.grid_kappa  # a grid ξ's patch matrix has a row per output cell
    nz, n_out = k(numel(trace.spatial_out)) if patches else k(trace.nz), k(trace.n_out)
    dense = [s for s in head.xi if s.startswith("xi_instance") and s not in getattr(trace, "propagating", ())]
    square = nz * n_out if trace.view == "items" and dense else 0
    if trace.view != "grid":  # a patch ξ's matrix is the patch matrix, counted as κ's input
        if "xi_attribute" in head.xi:
            square = max(square, k(trace.m) * k(trace.mz))
        if "xi_attribute_post" in head.xi:
            square = max(square, k(trace.dk) * k(trace.d))
    return max(k(trace.mz) * nz, k(trace.d) * nz, square) + dim_size(getattr(trace, "scratch", 0), sizes, 0)


def node_elements(node, sizes: dict[str, int] | None = None) -> int:
    """The activation elements per sample a node is charged: its output and, for a layer, each head's largest
    intermediate (times its channels)."""
    elements = per_sample(node.type, sizes)
    if node.kind == "layer":
        elements += sum(head_elements(t, h, sizes) * h.channels for h, t in zip(node.layer.heads, node.trace["heads"]))
    return elements


def reference_elements(node, sizes: dict[str, int] | None = None) -> int:
    """The largest structural matrix the reference lowering builds for a node beyond what the default lowering
    needs: a linear recurrence's literal form (seed 004), per layer and direction the block-Toeplitz
    ``L`` ``[T·H, T·H]`` (its ``[T, T, H, H]`` blocks gathered and masked: about 3 (T·H)²), ``W_RNN = L (I_T ⊗ W_ih)``
    and its factor (2 · T·H · T·D) and the powers ``A^0 … A^T`` (twice (T+1)·H², a diagonal ``A`` made dense
    first); for a layer, the N×N matrix of each instance ξ that propagates over an edge list (graph, PageRank:
    the default lowering runs them on the edges) and a grid head's literal matrix (a convolution's or a pooling's
    padding matrix ``[N + 1, P·p]``, an aggregation matrix ``[N + 1, P]``); 0 for any other node."""
    if node.kind == "layer":
        return sum(dim_size(t.nz, sizes) * dim_size(t.n_out, sizes) * h.channels
                   for h, t in zip(node.layer.heads, node.trace["heads"])
                   if t.view == "items" and getattr(t, "propagating", ())) + \
            sum(dim_size(getattr(t, "literal", 0), sizes, 0) for t in node.trace["heads"])
    if node.kind != "recurrent":
        return 0
    spec = node.layer
    cell = spec.cell.component
    if not cell.linear or cell.selective or spec.kappa_state.name != "identity":
        return 0
    t, h = dim_size(node.type.shape[1], sizes), spec.hidden
    return max(3 * (t * h) ** 2 + 2 * (t * h) * (t * d) + 2 * (t + 1) * h * h for d in node.trace["recurrent"].d_in)


def node_steps(node, sizes: dict[str, int] | None = None) -> int:
    """Propagations a layer's ξ run one after another beyond one each (hops, power steps), symbols sized by
    ``sizes``."""
    if node.kind != "layer":
        return 0
    return sum(max(dim_size(s, sizes) - 1, 0) for t in node.trace["heads"] for _, s in getattr(t, "steps", ()))


def stepping_use(node, sizes: dict[str, int] | None = None):
    """The ξ use of a layer that runs the most steps one after another (where a step budget error points)."""
    best, most = None, 1
    for h, t in zip(node.layer.heads, node.trace["heads"]):
        for slot, s in getattr(t, "steps", ()):
            if dim_size(s, sizes) > most and slot in h.xi:
                best, most = h.xi[slot], dim_size(s, sizes)
    return best


def run_time_check(graph, sizes: dict[str, int], limits, reference: bool = False,
                   itemsize: int = BYTES_PER_ELEMENT) -> SpecError | None:
    """The check's memory and step estimates with the symbolic dimensions sized as the inputs size them: a located
    error (E0605 memory, E0604 steps) at the first node they take over ``limits``, else None. For the
    ``reference`` lowering, also the literal matrices it builds (:func:`reference_elements`, E0606), at
    ``itemsize`` bytes an element (the model's dtype: 8 in float64, where ``rpn2c show`` runs it); the activations
    stay float32 bytes per sample, as at check."""
    told = ", ".join(f"{k} = {v:,}" for k, v in sorted(sizes.items())) or "the declared sizes"
    memory = work = 0
    for node in graph.nodes():
        literal = reference_elements(node, sizes) * itemsize if reference else 0
        if memory + literal > limits.max_memory:
            return error_for([Diagnostic(
                "E0606", f"'{node.id}' in the reference lowering builds its literal matrices of {human_bytes(literal)} "
                         f"with {told}; the budget is {human_bytes(limits.max_memory)}", node.span,
                suggestion="the default lowering never builds them: compile without reference (rpn2c show draws "
                           "the reference lowering), feed fewer steps, shrink the layer, or raise the budget with "
                           "--max-memory or limits={'max_memory': n} when checking")], graph.sources)
        memory += node_elements(node, sizes) * BYTES_PER_ELEMENT
        if memory > limits.max_memory:
            return error_for([Diagnostic(
                "E0605", f"'{node.id}' brings the activations to {human_bytes(memory)} per sample with {told}; the "
                         f"budget is {human_bytes(limits.max_memory)}", node.span,
                suggestion="feed smaller inputs, or raise the budget with --max-memory or limits={'max_memory': n} "
                           "when checking")], graph.sources)
        steps = node_steps(node, sizes)
        if work + 1 + steps > limits.max_work and steps > node_steps(node):
            use = stepping_use(node, sizes)
            what = f"'{use.name}' in '{node.id}'" if use is not None else f"'{node.id}'"
            span = use.span if use is not None and use.span.line >= 1 else node.span
            return error_for([Diagnostic(
                "E0604", f"{what} with {told} runs {human_count(steps + 1)} steps one after another in each forward "
                         f"pass; the budget allows {limits.max_work:,} nodes and steps in all ({work:,} used before "
                         "it)", span,
                suggestion="feed fewer items, or raise the budget with --max-work or limits={'max_work': n} when "
                           "checking")], graph.sources)
        work += 1 + steps
    return None
