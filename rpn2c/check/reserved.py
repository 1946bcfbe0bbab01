"""Names a spec may not give a value, a model input or a head: the compiled model turns them into Python
identifiers (model inputs) and torch module attributes (values, heads), so a keyword or an attribute name that
``torch.nn.Module``, ``nn.ModuleDict`` (a layer's heads) or the compiled model already has would break it."""

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
    "_bind", "_bind_tied_psi", "_build", "_inline", "_input_checks", "_limits", "_name", "_program", "_repr_svg_",
    "_shared", "_sized", "_steps", "_tie_parameters", "_tied", "_within_budgets",
    "_unbatch_flags", "content_hash", "emit", "graph", "input_names", "input_types", "outputs", "program_source",
    "reference"
})
HEADS_ATTRIBUTES = frozenset({"clear", "items", "keys", "pop", "update", "values"})  # nn.ModuleDict's (a layer's heads)


def reserved(name: str, kind: str) -> str | None:
    """Why ``name`` cannot name a ``kind`` ("input", "value" or "head"), or None."""
    if name in PYTHON:
        return f"'{name}' is a Python keyword, which the compiled model cannot use as a name"
    taken = MODULE_ATTRIBUTES | (MODEL_ATTRIBUTES if kind == "value" else HEADS_ATTRIBUTES if kind == "head" else frozenset())
    if kind != "input" and (name in taken or (name.startswith("__") and name.endswith("__"))):
        return f"'{name}' is an attribute of the torch module it becomes, so a {kind} cannot take it as its name"
    return None
