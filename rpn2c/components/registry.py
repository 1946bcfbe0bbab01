"""The component registry: every RPN 2 function is declared once, here or in a sibling module.

An entry is a class deriving from a family base (:class:`Expansion`, :class:`Reconciliation`, ...). The class
declares, in one place:

- ``HP``: its pydantic hyper-parameter schema (``extra="forbid"``, defaults and bounds);
- the docstring's first line: the one-line doc with the formula;
- the family's shape rule and parameter-count rule (methods);
- ``build(...)``: the ``nn.Module`` implementing it (the default form; the reference lowering puts its literal
  forms in place, ``rpn2c/lower/literal_forms.py``);
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
import threading
from collections.abc import MutableMapping
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
    kernels: ClassVar[tuple] = ()  # the kernel ops it implements (``rpn2c.ir.kernels.Kernel``), its module's methods

    def __init__(self, hp: HP):
        self.hp = hp

    def tie(self, module, source) -> bool:
        """``tie = source`` on a node of this component: make ``module`` compute with ``source``'s tensors where the
        component ties in a way of its own (a relation with its factors swapped); False: the lowering points each
        of ``module``'s tensors at ``source``'s, in registration order."""
        return False

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


class Family(MutableMapping):
    """One family's entries by name, each module imported when one of its names is first read.

    ``rpn2c.components.index`` says which module registers which name: reading a name imports that module (its
    classes register themselves), so checking a spec builds the hyper-parameter schemas of the components it uses,
    not of all of them (191 pydantic models). Iterating, counting, and reading a name the index does not know
    (a misspelling, about to be reported with the names it resembles, or a name of a stale index) import every
    component module first. Iteration follows the index: the order an eager import of every module registered
    the names in, whatever order they were read in."""

    def __init__(self, family: str):
        self.family = family
        self._entries: dict[str, Entry] = {}

    def add(self, entry: Entry) -> None:
        """Register ``entry`` under its name; an entry already registered under that name is a bug."""
        if entry.name in self._entries:
            raise RuntimeError(f"duplicate {self.family} component {entry.name!r}")
        self._entries[entry.name] = entry

    def find(self, name: str, everywhere: bool = True) -> Entry | None:
        """The entry ``name``, its module imported if need be; None if there is none (``everywhere``: after
        importing every component module, in case the index is stale)."""
        entry = self._entries.get(name)
        if entry is None:
            module = _index().get(self.family, {}).get(name)
            if module is not None:
                importlib.import_module(f"rpn2c.components.{module}")
                entry = self._entries.get(name)
            if entry is None and everywhere and load_all():
                entry = self._entries.get(name)
        return entry

    def __getitem__(self, name: str) -> Entry:
        entry = self.find(name)
        if entry is None:
            raise KeyError(name)
        return entry

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __iter__(self):
        load_all()
        order = _index().get(self.family, {})
        return iter([n for n in order if n in self._entries] + [n for n in self._entries if n not in order])

    def __len__(self) -> int:
        load_all()
        return len(self._entries)

    def __setitem__(self, name: str, entry: Entry) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __repr__(self) -> str:
        return f"Family({self.family!r}, {len(self._entries)} of its entries imported)"


REGISTRY: dict[str, Family] = {f: Family(f) for f in FAMILIES}
SYNONYMS: dict[str, dict[str, str]] = {f: {} for f in FAMILIES}  # family -> other libraries' name -> spec text
#: every component family module, in the order they register their components (``load_all`` imports them)
MODULES = (
    "cells", "fusion", "kappa", "kappa_compression", "kappa_expansion", "ops", "pi", "processing", "psi", "xi",
    "kappa_patches", "kappa_pooling", "kappa_probabilistic", "kappa_sampling", "kappa_wavelets",  # κ catalog
    "xi_graph", "xi_attention",  # graph, bilinear ξ
    "xi_kernels", "xi_learned", "xi_hybrid", "xi_structural",  # ξ catalog
    "xi_graph_attention",  # GAT's edge attention
    "xi_recurrence",  # seed 004's recurrence ξ
    "cells_selective",  # selective and complex cells
    "sequence",  # tokens, positions, readouts
    "free_params",  # free learnable tensors
    "psi_tied",  # ψ from another node's weight
    "masks",  # masks computed from token ids
    "position_bias",  # per-head relative position biases (T5, ALiBi)
    "windows",  # shifted-window attention, its bias, patch merging (Swin)
    "ops_batch",  # the opt-in batch interdependence
    "layout", "pi_more", "processing_more",  # layout ops, more π, processing
    "relation",  # relations as values
    "sequence_conv",  # the short causal depthwise convolution
    "readouts",  # one item of a sequence, one step of a signal
    "xi_spectral",  # spectral graph ξ (ChebNet)
    "hopfield",  # the classical Hopfield network
    "xi_preprocessed",  # ξ's input pre-processing (§5.1.1)
    "feature_transform",  # a predicted matrix on every item's features (PointNet's T-nets)
)

_LOADED: list[bool] = []  # [True] once every component module is imported
_LOADING = threading.RLock()


def _index() -> dict[str, dict[str, str]]:
    from rpn2c.components.index import INDEX

    return INDEX


def load_all() -> bool:
    """Import every component module (:data:`MODULES`); False if that was done before. Another thread
    listing the registry meanwhile waits for the whole of it."""
    with _LOADING:
        if _LOADED:
            return False
        _LOADED.append(True)
        for module in MODULES:
            importlib.import_module(f"rpn2c.components.{module}")
    return True


def register(cls: type[Component]) -> type[Component]:
    """Class decorator adding an entry (its aliases and synonyms) to the registry; duplicates are a bug."""
    table, synonyms = REGISTRY[cls.family], SYNONYMS[cls.family]
    own = vars(cls).get("synonyms", {})  # a subclass names other things than its base
    for name in own:
        if name in synonyms:
            raise RuntimeError(f"duplicate {cls.family} synonym {name!r}")
    for name in (cls.name, *cls.aliases):
        table.add(Entry(name, cls.family, cls))
    synonyms.update(own)
    return cls


def lookup(name: str, families: tuple[str, ...]) -> Entry | None:
    """The entry ``name`` of the first of ``families`` that has one, or None."""
    for everywhere in (False, True):  # the index first; every module only for a name it does not know
        for fam in families:
            entry = REGISTRY[fam].find(name, everywhere)
            if entry is not None:
                return entry
    return None


def names(families: tuple[str, ...] | None = None) -> list[str]:
    """Every name (aliases included) of ``families`` (default: all), sorted; read from the index where it can."""
    fams = families or tuple(FAMILIES)
    if not _LOADED:
        index = _index()
        return sorted({n for f in fams for n in (*index.get(f, ()), *REGISTRY[f]._entries)})
    return sorted({n for f in fams for n in REGISTRY[f]})


def synonym_hint(name: str, families: tuple[str, ...] | None = None) -> str | None:
    """How a spec writes what other libraries call ``name`` (an entry's ``synonyms``: ``sigmoid_linear_unit`` is
    ``silu``, ``gelu_tanh`` is ``gelu(approximate = "tanh")``), or None."""
    load_all()  # synonyms are declared by the component modules
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


def kernels() -> dict[str, Any]:
    """Every kernel op a component declares, by name (``rpn2c.ir.kernels.Kernel``): the ξ kernels and the cells'
    recurrent forms. Loads every family."""
    load_all()
    out: dict[str, Any] = {}
    for e in all_entries():
        for k in e.cls.kernels:
            if out.setdefault(k.name, k) is not k:
                raise ValueError(f"kernel op {k.name!r} is declared twice ({e.name})")
    return out


def all_entries() -> list[Entry]:
    """Every entry once (aliases excluded), sorted by family then name."""
    return [e for f in FAMILIES for n, e in sorted(REGISTRY[f].items()) if n == e.cls.name]
