"""Where a compiled model puts each value's module, and the names a head or an input cannot take.

A value's module sits at its spec path (``conv1``, ``enc.attn``), so its parameters get readable ``state_dict``
names (``conv1.psi.weight``). A segment of that path that cannot name a torch sub-module as it is (a Python
keyword, or an attribute that a torch module, a block scope or the compiled model already has: ``train``, ``to``,
``forward``, ``class``) takes the first free ``train_``, ``train__``, … among its siblings instead: every value name
is allowed, and a spec without such names keeps the paths it always had. A head is an entry of its layer's
``nn.ModuleDict`` and a Python name in an exported program, and a model is called with its inputs by name: a head
cannot take a keyword or an attribute name, nor an input the name ``self`` (E0208, :func:`reserved`)."""

from __future__ import annotations

import keyword

PYTHON = frozenset(keyword.kwlist) | {"self"}
# what torch already defines (tests/test_error_catalog.py checks these lists against the installed torch)
MODULE_ATTRIBUTES = frozenset({
    "T_destination", "_apply", "_backward_hooks", "_backward_pre_hooks", "_buffers", "_call_impl",
    "_compiled_call_impl", "_forward_hooks", "_forward_hooks_always_called", "_forward_hooks_with_kwargs",
    "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_get_backward_hooks", "_get_backward_pre_hooks",
    "_get_name", "_is_full_backward_hook", "_load_from_state_dict", "_load_state_dict_post_hooks",
    "_load_state_dict_pre_hooks", "_maybe_warn_non_full_backward_hook", "_modules", "_named_members",
    "_non_persistent_buffers_set", "_parameters", "_register_load_state_dict_pre_hook", "_register_state_dict_hook",
    "_replicate_for_data_parallel", "_save_to_state_dict", "_slow_forward", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_version", "_wrapped_call_impl", "add_module", "apply", "bfloat16", "buffers",
    "call_super_init", "children", "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr",
    "float", "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half", "ipu",
    "load_state_dict", "modules", "mtia", "named_buffers", "named_children", "named_modules", "named_parameters",
    "parameters", "register_backward_hook", "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_load_state_dict_post_hook",
    "register_load_state_dict_pre_hook", "register_module", "register_parameter", "register_state_dict_post_hook",
    "register_state_dict_pre_hook", "requires_grad_", "set_extra_state", "set_submodule", "share_memory",
    "state_dict", "to", "to_empty", "train", "training", "type", "xpu", "zero_grad"
})
MODEL_ATTRIBUTES = frozenset({  # the compiled model's own, beside a module's (values are its attributes)
    "_bind", "_bind_tied_psi", "_build", "_inline", "_input_checks", "_itemsize", "_limits", "_name", "_program",
    "_repr_svg_", "_shared", "_sized", "_steps", "_tie_parameters", "_tied", "_within_budgets",
    "_unbatch_flags", "content_hash", "emit", "graph", "input_names", "input_types", "outputs", "program_source",
    "reference"
})
HEADS_ATTRIBUTES = frozenset({"clear", "items", "keys", "pop", "update", "values"})  # nn.ModuleDict's (a layer's heads)


def reserved(name: str, kind: str) -> str | None:
    """Why ``name`` cannot name a ``kind`` ("head" or "input"), or None: a head is an entry of the
    ``nn.ModuleDict`` of its layer's heads and a Python name in an exported program; a model is called with its
    inputs by name (``model(**inputs)``), which ``self``, torch's own argument, cannot be."""
    if kind == "input":
        return ("'self' is the argument torch passes the model itself, so an input cannot take it as its name"
                if name == "self" else None)
    if name in PYTHON:
        return f"'{name}' is a Python keyword, so a head cannot take it as its name"
    if name in MODULE_ATTRIBUTES | HEADS_ATTRIBUTES or _dunder(name):
        return (f"'{name}' is an attribute of the torch module that holds a layer's heads, so a head cannot take "
                "it as its name")
    return None


def needs_mangling(segment: str) -> bool:
    """``segment`` cannot name a sub-module of the compiled model or of a block scope as it is."""
    return segment in PYTHON or segment in MODULE_ATTRIBUTES or segment in MODEL_ATTRIBUTES or _dunder(segment)


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def module_paths(ids) -> dict[str, str]:
    """Each node id's sub-module path (``enc.attn``): the id itself, with every segment that
    :func:`needs_mangling` replaced by the first of ``seg_``, ``seg__``, … that neither needs it nor is a sibling's
    segment (a dunder drops its underscores first: ``__init__`` -> ``init_``). Depends on the ids only."""
    ids = list(ids)
    siblings: dict[str, set[str]] = {}  # parent id path -> its children's segments
    for nid in ids:
        parts = nid.split(".")
        for i, part in enumerate(parts):
            siblings.setdefault(".".join(parts[:i]), set()).add(part)
    renamed: dict[tuple[str, str], str] = {}
    for parent, names in siblings.items():
        taken = set(names)
        for name in sorted(n for n in names if needs_mangling(n)):
            base = (name.strip("_") or "value") if _dunder(name) else name
            new = base + "_"
            while new in taken or needs_mangling(new):
                new += "_"
            renamed[parent, name] = new
            taken.add(new)
    out = {}
    for nid in ids:
        parts = nid.split(".")
        out[nid] = ".".join(renamed.get((".".join(parts[:i]), part), part) for i, part in enumerate(parts))
    return out
