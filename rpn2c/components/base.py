"""Family base classes: the shape, parameter-count and build contract of each kind of component.

Shapes are per sample. A head sees its data as ``[N, M]`` (items x features; vectors have no item axis,
images are turned into patches by a grid ξ). Feature specs passed to κ are ``(M,)`` for flat features or
``(C, *S)`` for a grid.

The families' ``nn.Module`` bases (``XiModule``, ``PsiModule``) live in :mod:`rpn2c.components.impl.base` with
every other implementation class: a component imports them inside ``build``, so defining and checking components
never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TYPE_CHECKING

from rpn2c.components.registry import Component
from rpn2c.ir.types import Dim, TensorType, dim_add, dim_mul
from rpn2c.lazy import lazy_exports

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch
    from torch import nn
    from rpn2c.components.impl.base import PsiModule, XiModule


class ShapeRuleError(ValueError):
    """Raised by a shape rule; the checker turns it into a located E04xx diagnostic (at input ``arg`` when given,
    else at the whole call)."""

    def __init__(self, message: str, arg: int | None = None, code: str | None = None):
        super().__init__(message)
        self.arg, self.code = arg, code


def example_model(*lines: str) -> str:
    """A one-model example spec in canonical form; ``lines`` are its statements (nested ones pre-indented)."""
    return "model example {\n" + "".join(f"  {ln}\n" for ln in lines) + "}\n"


def head_example(input_type: str, *settings: str, inputs: tuple[str, ...] = ()) -> str:
    """An example with one head ``y = head(x)`` of width 3 over ``x: input_type`` (more ``inputs`` declared after)."""
    return example_model(f"input x: {input_type}", *(f"input {i}" for i in inputs), "y = head(x) {",
                         *(f"  {s}" for s in settings), "  out = 3", "}", "return y")


def compress_example(input_type: str) -> str:
    """An example with one compression layer ``y = compress(x)`` over a grid."""
    return example_model(f"input x: {input_type}", "y = compress(x) {", "  kappa = {call}", "}", "return y")


def graph_example() -> str:
    """An example over one graph (node features and an edge list), the entry in the instance ξ slot."""
    return head_example("nodes[N, 4]", "xi_instance = {call}", inputs=("edges: edges[2, E]",))


def binary_example() -> str:
    """An example combining two values: ``y = name(a, b)``."""
    return example_model("input a: vector[B, 4]", "input b: vector[B, 4]", "y = {name}(a, b)", "return y")


GRID_IMAGE, GRID_VOLUME = "image[B, 2, 6, 6]", "volume[B, 2, 4, 4, 4]"


# ------------------------------------------------------------------------------------------------- κ
class Kappa(Component):
    """Data transformation κ: expansion (D >= m) or compression (D <= m), on the last (feature) axis."""

    grid_only: ClassVar[bool] = False  # needs grid features (patch pooling)
    any_grid_size: ClassVar[bool] = False  # a grid κ whose output grid is fixed: the input's may be symbolic

    @property
    def elementwise(self) -> bool:
        """κ acts on each attribute alone, giving ``degree`` outputs each (its hyper-parameters may decide)."""
        return False

    def native_pooling(self, rank: int) -> bool:
        """A patch compression torch's pooling computes natively on a ``rank``-D grid (rule ``pool``)."""
        return False

    def unfolds(self, rank: int) -> bool:
        """A patch expansion im2col (``F.unfold``) computes on a ``rank``-D grid (rule ``unfold_kappa``)."""
        return False

    def stacked_basis(self, x: torch.Tensor, axis: int) -> torch.Tensor | None:
        """Elementwise κ: the degrees computed straight into a new axis ``axis`` of ``x``, or None (then
        ``basis`` and a copy)."""
        return None

    @classmethod
    def example_template(cls) -> str:
        if cls.grid_only:
            return compress_example(GRID_IMAGE)
        return head_example("vector[B, 4]", "kappa = {call}")

    def degree(self) -> int:
        return 1

    def value_at_zero(self) -> torch.Tensor | None:
        """κ applied to a single 0 (elementwise only): zero padding before κ reads this value."""
        return None

    def features_out(self, feat: tuple[int, ...]) -> tuple[int, ...]:
        if self.elementwise:
            return (feat[0] * self.degree(), *feat[1:])
        if len(feat) != 1:
            raise ShapeRuleError(f"{self.name} needs flat features, got a grid {feat}; flatten() first")
        return (self.flat_out(feat[0]),)

    def flat_out(self, m: int) -> int:
        raise NotImplementedError

    def count(self, feat: tuple[int, ...]) -> int:
        return 0

    def scratch(self, feat: tuple[int, ...]) -> int:
        """Elements per item of the widest intermediate κ makes besides its output (an inner κ's output); the
        resource guard charges it (``rpn2c.check.budget``)."""
        return 0

    def literal(self, feat: tuple[int, ...]) -> int:
        """Elements of the structural matrix only the reference lowering builds for a grid κ (a pooling's padding
        matrix); :func:`rpn2c.ir.estimate.reference_elements` charges it."""
        return 0

    def build(self, feat: tuple[int, ...]) -> nn.Module:
        from rpn2c.components.impl.base import _Elementwise

        return _Elementwise(self) if self.elementwise else self.module(feat)

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise κ: x[...] -> [..., degree]."""
        raise NotImplementedError

    def module(self, feat: tuple[int, ...]) -> nn.Module:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------- ψ
class Reconciliation(Component):
    @classmethod
    def example_template(cls) -> str:
        return head_example("vector[B, 4]", "psi = {call}")

    def check(self, n: int, D: int) -> str | None:
        return None

    def count(self, n: int, D: int) -> int:
        raise NotImplementedError

    def scratch(self, n: int, D: int) -> int:
        """Elements ψ makes besides its parameters: the n x D matrix it fabricates from fewer ones."""
        return 0

    def row_width(self, n: int, D: int) -> int:
        """Elements per row of κ's output that applying ψ in factored form makes (a rank-r factor: r)."""
        return 0

    def build(self, n: int, D: int) -> PsiModule:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------- π
class Remainder(Component):
    @classmethod
    def example_template(cls) -> str:
        return head_example("vector[B, 4]", "pi = {call}")

    def check(self, m: int, n: int) -> str | None:
        return None

    def count(self, m: int, n: int) -> int:
        return 0

    def scratch(self, m: int, n: int) -> int:
        """Elements per item of the widest intermediate π makes (an inner κ's output)."""
        return 0

    def build(self, m: int, n: int) -> nn.Module | None:
        """A module mapping [..., m] -> [..., n], or None for the zero remainder."""
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------- ξ
@dataclass(frozen=True)
class XiContext:
    """What a ξ may look at when its shape and parameters are decided.

    axis: "attribute" (acts on features, ``Z @ A``) or "instance" (acts on items, ``A @ Z``, row = output item).
    size: the length of the axis it acts on (M or N). query_features / context_features: the head's main input
    and context input feature counts (they differ for cross-attention). query_items: N of the main input.
    heads: how many heads its layer has; head: which of them the ξ is built for (a per-head attention mask
    ``head_bias[H, Nq, Nc]`` gives head h its slice h).
    """

    axis: str
    size: Dim
    query_features: Dim
    context_features: Dim
    query_items: Dim | None
    aux: dict  # hyper-parameter name -> TensorType of referenced dataflow values
    heads: int = 1
    head: int = 0


def edge_messages(ctx: XiContext) -> Dim:
    """Elements a propagation over an edge list makes: per edge (and self-loop) its message along the other axis
    and its source, target and weight."""
    edges = ctx.aux.get("edges")
    count = edges.shape[-1] if edges is not None else 1
    other = ctx.context_features if ctx.axis == "instance" else (ctx.query_items or 1)
    return dim_mul(dim_add(count, ctx.size), dim_add(other, 3))


class Interdependence(Component):
    """ξ. ``kinds``: static (a fixed matrix), param (learned matrix), data (computed from the input), grid."""

    axes: ClassVar[tuple[str, ...]] = ("attribute", "instance")
    kind: ClassVar[str] = "static"
    # a softmax-bilinear (attention) ξ: its module has query/key projections ``w_q`` [Mq, r], ``w_k`` [Mc, r]
    # (absent when ``full``), biases ``b_q``, ``b_k`` and ``attend(q, k, v, aux)``; identical heads of a layer
    # store these packed (``rpn2c/ir/layout.py``)
    attention: ClassVar[bool] = False
    shareable: ClassVar[bool] = False  # depends only on its named inputs: computed once per forward (shared_xi)

    @classmethod
    def example_template(cls) -> str:
        if cls.kind == "grid":
            return head_example(GRID_IMAGE, "xi_attribute = {call}")
        return head_example("sequence[B, 5, 4]", "xi_instance = {call}")

    def out_size(self, ctx: XiContext) -> Dim:
        return ctx.size

    def count(self, ctx: XiContext) -> int:
        return 0

    def scratch(self, ctx: XiContext) -> Dim:
        """Elements per sample ξ makes besides its matrix (an inner κ's outputs, fabricated matrices, a hybrid's
        parts); a symbol in it is sized again at run time (``rpn2c.check.budget``)."""
        return 0

    def steps(self, ctx: XiContext) -> Dim:
        """Propagations ξ runs one after another in a forward pass (a multi-hop graph's hops); charged to the work
        budget at check and again, with the inputs' sizes, at run time."""
        return 1

    def propagates(self) -> bool:
        """Its default lowering runs it hop by hop on an edge list (gather/index_add or SpMM), never its N×N matrix:
        the memory estimate charges its edge messages instead (kernel ``spmm``'s predicate reads it too)."""
        return False

    def one_hop(self) -> bool:
        """Its literal matrix is a sparse 1-hop adjacency, whose edge list its module's ``support`` gives (a hybrid
        ξ's Hadamard product runs on it: kernel ``edge_hadamard``)."""
        return False

    def affine(self) -> bool:
        """ξ adds a learned bias after its matrix, ``A z + b 1ᵀ`` (the matrix ``[A | b]`` on the items with a
        constant item of ones): it does not commute with ψ, and its matrix alone is not the map."""
        return False

    def build(self, ctx: XiContext) -> XiModule:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------- fusion
class Fusion(Component):
    @classmethod
    def example_template(cls) -> str:
        return example_model("input x: vector[B, 4]", "y = layer(x) {", "  head a {", "    out = 3", "  }",
                             "  head b {", "    out = 3", "  }", "  fusion = {call}", "}", "return y")

    def check(self, dims: list[int]) -> str | None:
        return None

    def out_features(self, dims: list[int]) -> int:
        raise NotImplementedError

    def count(self, dims: list[int]) -> int:
        return 0

    def build(self, dims: list[int]) -> nn.Module:
        """A module mapping a list of [..., d_i] tensors to one [..., out] tensor."""
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------- processing/op
class Processing(Component):
    """Shape-preserving processing (activation, norm, dropout); also callable as a one-input op."""

    arity: ClassVar[tuple[int, int]] = (1, 1)  # input values when called as an op

    @classmethod
    def example_template(cls) -> str:
        return head_example("vector[B, 4]", "post = [{call}]")

    def check(self, t: TensorType) -> str | None:
        return None

    def count(self, t: TensorType) -> int:
        return 0

    def build(self, t: TensorType) -> nn.Module:
        raise NotImplementedError


class Op(Component):
    """A dataflow operation over one or more values (flatten, add, concat, ...)."""

    arity: ClassVar[tuple[int, int]] = (1, 1)

    @classmethod
    def example_template(cls) -> str:
        return example_model("input x: sequence[B, 5, 4]", "y = {call}(x)", "return y")

    def infer(self, inputs: list[TensorType]) -> TensorType:
        raise NotImplementedError

    def count(self, inputs: list[TensorType]) -> int:
        return 0

    def axis_limits(self, inputs: list[TensorType]) -> list[tuple[Dim, int, int | None]]:
        """What the op needs of an axis length the check may not know (a symbolic one, sized by the data):
        ``(length, fewest, most or None)`` each, e.g. learned_position's ``T <= max_len``. The inputs ``rpn2c
        export`` and ``show`` make up are sized within them (``rpn2c.runtime.axis_limits``)."""
        return []

    def build(self, inputs: list[TensorType]) -> nn.Module:
        raise NotImplementedError


_IMPL = ("PsiModule", "XiModule")  # the module bases, kept importable from here (importing torch on first access)


__getattr__ = lazy_exports(__name__, dict.fromkeys(_IMPL, "rpn2c.components.impl.base"), globals())[0]
