"""The component registry: every RPN 2 function is declared once, here or in a sibling module.

An entry is a class deriving from a family base (:class:`Expansion`, :class:`Reconciliation`, ...). The class
declares, in one place:

- ``HP``: its pydantic hyper-parameter schema (``extra="forbid"``, defaults and bounds);
- the docstring's first line: the one-line doc with the formula;
- the family's shape rule and parameter-count rule (methods);
- ``build(...)``: the ``nn.Module`` implementing it (both lowerings; ``reference=True`` asks for the literal form);
- ``example``: a minimal runnable spec using it in its slot (docs, ``rpn2c components NAME`` and the compile tests
  use the same text). The family's ``example_template()`` fits most entries: ``{call}`` stands for
  ``example_call`` (default: the bare name; ``{name}`` stands for the name, so a shared base can declare it), so an
  entry writes its call when it needs hyper-parameters filled in, or its whole ``example`` when the template does
  not fit;
- ``compile_limitation``: set only when ``torch.compile(fullgraph=True)`` cannot compile it for a reason outside
  the project (a torch limitation), with that reason.

Names are looked up only in this table: a spec can never import or execute anything else.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable

from pydantic import BaseModel, ConfigDict

from rpn2c.errors import did_you_mean
from rpn2c.ir.graph import HEAD_SLOTS
from rpn2c.ir.types import ValueRef  # noqa: F401  (hyper-parameters may name dataflow values)

FAMILIES = {
    "expansion": "data expansion κ (D >= m)",
    "compression": "data compression κ (D <= m)",
    "reconciliation": "parameter reconciliation ψ: R^l -> R^{n x D}",
    "remainder": "remainder π: R^m -> R^n",
    "interdependence": "data interdependence ξ (attribute or instance)",
    "fusion": "fusion of heads or channels",
    "cell": "recurrent cell: combines the gate heads and the fed-back state",
    "processing": "input/output processing (activation, norm, dropout)",
    "op": "dataflow operation",
}

# Which families may fill which head setting.
SLOT_FAMILIES: dict[str, tuple[str, ...]] = {
    "kappa": ("expansion", "compression"),
    "psi": ("reconciliation",),
    "pi": ("remainder",),
    **{slot.name: ("interdependence",) for slot in HEAD_SLOTS},
    "fusion": ("fusion",),
    "cell": ("cell",),
    "kappa_state": ("expansion", "compression"),
    "channel_fusion": ("fusion",),
    "pre": ("processing",),
    "post": ("processing",),
}


class HP(BaseModel):
    """Base of every hyper-parameter schema: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True, defer_build=True)


class Component:
    """Base of all registry entries. Subclasses set ``name``, ``family`` and ``HP``."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    HP: ClassVar[type[HP]] = HP
    aliases: ClassVar[tuple[str, ...]] = ()
    # other libraries' names for this entry that a spec does not accept (they need hyper-parameters, or name it only
    # loosely): name -> how a spec writes it here, offered as the help of an unknown-component error (the class's
    # own: a subclass does not inherit them)
    synonyms: ClassVar[dict[str, str]] = {}
    # help for a refused hyper-parameter value whose job another entry does: {key: {value: help}}
    value_hints: ClassVar[dict[str, dict[str, str]]] = {}
    positional: ClassVar[tuple[str, ...]] = ()  # hyper-parameters a call may give by position (``tied(emb)``)
    tags: ClassVar[frozenset[str]] = frozenset()
    example: ClassVar[str] = ""  # a whole runnable spec, when the family template does not fit
    example_call: ClassVar[str] = ""  # how the example writes this entry, e.g. ``patch_max(size = 2)``
    compile_limitation: ClassVar[str | None] = None  # why fullgraph torch.compile fails (a torch limitation)
    reads_tokens: ClassVar[bool] = False  # an op that may read integer token ids (the checker refuses all others)

    def __init__(self, hp: HP):
        self.hp = hp

    @classmethod
    def doc(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def example_template(cls) -> str:
        """The family's example spec, ``{call}`` standing for the entry (families override this)."""
        return ""

    @classmethod
    def example_spec(cls) -> str:
        """The entry's runnable example: a whole spec (canonical form) using it in its slot."""
        text = (cls.example or cls.example_template()).replace("{call}", cls.example_call or cls.name)
        return text.replace("{name}", cls.name)

    def value_refs(self) -> list[tuple[str, ValueRef]]:
        """The (key, ref) pairs of hyper-parameters naming dataflow values."""
        return [(k, v) for k, v in self.hp if isinstance(v, ValueRef)]


@dataclass(frozen=True)
class Entry:
    name: str
    family: str
    cls: type[Component]

    @property
    def schema(self) -> type[HP]:
        return self.cls.HP

    @property
    def doc(self) -> str:
        return self.cls.doc()

    @property
    def example(self) -> str:
        return self.cls.example_spec()

    @property
    def compile_limitation(self) -> str | None:
        return self.cls.compile_limitation

    def hyperparameters(self) -> list[tuple[str, str, Any]]:
        """(name, type, default) for docs and ``rpn2c components``; required ones have default ``...``."""
        out = []
        for key, f in self.schema.model_fields.items():
            default = ... if f.is_required() else f.default
            out.append((key, _type_name(f.annotation), default))
        return out


def _type_name(annotation) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "").replace("rpn2c.components.registry.", "")


class Lazy:
    """A function named by its import path, imported when first read through its class or an instance:
    ``fn = Lazy("torch.nn.functional.gelu")`` acts as ``fn = staticmethod(F.gelu)``, and defining (or checking) the
    component imports nothing (torch is imported when a model is built)."""

    def __init__(self, path: str):
        self.path, self._value = path, None

    def __get__(self, obj, owner=None):
        if self._value is None:
            module, _, name = self.path.rpartition(".")
            self._value = getattr(importlib.import_module(module), name)
        return self._value


REGISTRY: dict[str, dict[str, Entry]] = {f: {} for f in FAMILIES}
SYNONYMS: dict[str, dict[str, str]] = {f: {} for f in FAMILIES}  # family -> other libraries' name -> spec text


def register(cls: type[Component]) -> type[Component]:
    """Class decorator adding an entry (its aliases and synonyms) to the registry; duplicates are a bug."""
    table, synonyms = REGISTRY[cls.family], SYNONYMS[cls.family]
    own = vars(cls).get("synonyms", {})  # a subclass names other things than its base
    for name in (cls.name, *cls.aliases, *own):
        if name in table or name in synonyms:
            raise RuntimeError(f"duplicate {cls.family} component {name!r}")
    for name in (cls.name, *cls.aliases):
        table[name] = Entry(name, cls.family, cls)
    synonyms.update(own)
    return cls


def lookup(name: str, families: tuple[str, ...]) -> Entry | None:
    for fam in families:
        entry = REGISTRY[fam].get(name)
        if entry is not None:
            return entry
    return None


def names(families: tuple[str, ...] | None = None) -> list[str]:
    fams = families or tuple(FAMILIES)
    return sorted({n for f in fams for n in REGISTRY[f]})


def synonym_hint(name: str, families: tuple[str, ...] | None = None) -> str | None:
    """How a spec writes what other libraries call ``name`` (an entry's ``synonyms``: ``sigmoid_linear_unit`` is
    ``silu``, ``gelu_tanh`` is ``gelu(approximate = "tanh")``), or None."""
    for fam in families or tuple(FAMILIES):
        how = SYNONYMS[fam].get(name.lower())
        if how is not None:
            if how.isidentifier():  # a name: the editor's quick fix takes it
                return f"did you mean '{how}'? ('{name}' is its name in other libraries)"
            return f"rpn2c writes '{name}' as {how}"
    return None


def unknown_hint(name: str, families: tuple[str, ...] | None = None, extra: Iterable[str] = ()) -> str | None:
    """The help for an unknown component ``name``: :func:`synonym_hint`, else the closest names among the entries
    of ``families`` and ``extra`` (blocks)."""
    return synonym_hint(name, families) or did_you_mean(name, [*names(families), *extra])


def all_entries() -> list[Entry]:
    """Every entry once (aliases excluded), sorted by family then name."""
    return [e for f in FAMILIES for n, e in sorted(REGISTRY[f].items()) if n == e.cls.name]
