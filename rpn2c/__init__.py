"""rpn2c: a compiler for RPN 2 (Reconciled Polynomial Network 2) model specs.

    model = rpn2c.compile(text)            # -> torch.nn.Module
    graph = rpn2c.check(text)              # -> IR graph with every shape inferred
"""

from rpn2c.api import check, check_file, compile, compile_file
from rpn2c.check.budget import Limits
from rpn2c.frontends import TorchSpec, from_torch
from rpn2c.errors import (
    Diagnostic,
    SpecError,
    SpecGraphError,
    SpecNameError,
    SpecResourceError,
    SpecShapeError,
    SpecSyntaxError,
    SpecTypeError,
    Span,
)

__version__ = "0.1.0"

__all__ = [
    "check", "check_file", "compile", "compile_file", "Diagnostic", "Limits", "Span", "SpecError", "SpecGraphError",
    "SpecNameError", "SpecResourceError", "SpecShapeError", "SpecSyntaxError", "SpecTypeError", "TorchSpec", "__version__", "from_torch",
]
