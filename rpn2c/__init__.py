"""rpn2c: a compiler for RPN 2 (Reconciled Polynomial Network 2) model specs.

    model = rpn2c.compile(text)            # -> torch.nn.Module
    graph = rpn2c.check(text)              # -> IR graph with every shape inferred

Importing the package is cheap: the entry points load the checker (and the component registry) on first use, and
checking, formatting and the language server never import torch; ``compile`` imports it when it builds a module,
``from_torch`` / ``TorchSpec`` when their front end is first used.
"""

from rpn2c.check.budget import Limits
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
from rpn2c.lazy import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "check", "check_file", "compile", "compile_file", "Diagnostic", "Limits", "Span", "SpecError", "SpecGraphError",
    "SpecNameError", "SpecResourceError", "SpecShapeError", "SpecSyntaxError", "SpecTypeError", "TorchSpec", "__version__", "from_torch",
]

globals().pop("check")  # the subpackage, bound by the import above: ``rpn2c.check`` is the entry point below

_LAZY = {"check": ".api", "check_file": ".api", "compile": ".api", "compile_file": ".api",  # the checker, registry
         "TorchSpec": ".frontends", "from_torch": ".frontends"}  # torch
# the entry points, imported on first access (``rpn2c --help`` and ``rpn2c fmt`` need none of them)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
