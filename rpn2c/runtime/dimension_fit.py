"""Which model parameter sets a dimension the data disagrees with, and the ``--param`` that fixes it.

The spec is re-checked with one parameter moved at a time (checking is cheap and torch-free), so a dimension
written through arithmetic, a block or a head's ``out`` is found as well as one written as the parameter itself:
a parameter sets the dimension when moving it moves the dimension; when exactly one does, its value for the data's
size is found by trying that size, or, for a dimension linear in it (``2 * d``), by solving.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rpn2c.errors import SpecError
from rpn2c.ir.graph import Graph

MAX_PARAMS = 16  # parameters tried (two checks each)


@dataclass(frozen=True)
class Fit:
    """``param``: the one model parameter the dimension follows (None: none, or several); ``value``: its value
    that gives the data's size and checks (None: none found); ``why_not``: the first error of the spec with
    ``param`` at the data's size, when that does not check."""

    param: str | None = None
    value: int | None = None
    why_not: str | None = None


def fit_dimension(spec: str, model: str, root: str | None, params: dict, dim: Callable[[Graph], object],
                  want: int, have: int) -> Fit:
    """The parameter of ``model`` in the spec file ``spec`` (checked with ``params``) that sets ``dim(graph)``,
    which is ``want`` and should be ``have``."""
    from rpn2c.api import check_file
    from rpn2c.check.loader import read_spec
    from rpn2c.syntax.parser import parse

    try:
        defn = parse(read_spec(spec), spec).definition(model)
    except (OSError, SpecError):
        return Fit()
    if defn is None:
        return Fit()

    def trial(name: str, value: int) -> tuple[object, str | None]:
        """The dimension with ``name = value`` (None and the first error when that does not check)."""
        try:
            return dim(check_file(spec, model=model, root=root, params={**params, name: value})), None
        except SpecError as exc:
            return None, exc.diagnostics[0].message
        except (KeyError, IndexError, AttributeError):  # the value or axis is not there with this value
            return None, None

    moved = []
    for p in [p.name for p in defn.params][:MAX_PARAMS]:
        at_have, why_not = trial(p, have)
        at_next, _ = trial(p, have + 1)
        sizes = [d for d in (at_have, at_next) if isinstance(d, int)]
        if not sizes:  # neither checks (d = 1 leaves no room for 4 heads): does it move the dimension elsewhere?
            sizes = [d for d in (trial(p, want + 1)[0],) if isinstance(d, int)]
        if any(d != want for d in sizes):
            moved.append((p, at_have, at_next, why_not))
    if len(moved) != 1:
        return Fit()
    p, at_have, at_next, why_not = moved[0]
    if at_have == have:
        return Fit(p, have)
    if isinstance(at_have, int) and isinstance(at_next, int) and at_next != at_have:
        step = at_next - at_have  # the dimension is at_have + step·(value − have) near have
        value, rest = divmod(have - at_have, step)
        if rest == 0 and have + value >= 1 and trial(p, have + value)[0] == have:
            return Fit(p, have + value)
    return Fit(p, None, why_not)
