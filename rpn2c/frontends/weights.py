"""Trained weights between a compiled spec and a library's model, both ways, by a weight map.

A :class:`WeightMap` lists, for each tensor of the spec's ``state_dict``, the library tensors it is made of: one
tensor as it is, one transposed (GPT-2's ``Conv1D`` stores ``W`` as ``[in, out]``), or several stacked along the
first axis (the packed ``in_proj_weight`` of attention heads is ``q_proj``, ``k_proj`` and ``v_proj`` row after
row), or one reshaped (a convolution kernel ``[out, C, p, p]`` as a patch head's ψ ``[out, C·p·p]``, a class token
``[1, 1, d]`` as ``[d]``: a reshaping link needs the other side's shapes). ``{i}`` in a key stands for the layer
index of a repeated block. The shipped maps sit in ``rpn2c/frontends/weight_maps/``, one module per shipped spec
file declaring ``MAPS`` by model name (``specs/llama.rpn``: ``weight_maps/llama.py``)::

    from rpn2c.frontends import weights
    spec_model.load_state_dict(weights.to_spec("llama", library_model.state_dict(), layers=2))
    library_model.load_state_dict(weights.to_library("llama", spec_model.state_dict(), layers=2))

Every tensor is accounted for: a key the map names that is absent, a key of either state_dict the map does not
name, or a shape that does not fit is a :class:`WeightMapError` naming it.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, replace
from typing import Mapping


class WeightMapError(ValueError):
    """A state_dict does not fit its weight map: a missing, unmapped or misshapen tensor."""


@dataclass(frozen=True)
class Link:
    """Spec tensor ``spec`` = the library tensors ``library`` stacked on axis 0 (one: itself; ``transpose``: its
    transpose; ``reshape``: it reshaped, row-major, to the target's shape). ``optional``: both sides may lack it (a
    bias a configuration leaves out). ``layer = (k, o)``: repeat i of the spec's block is the library's layer
    k·i + o (a spec block holding k library layers, as Swin's pair of a plain and a shifted block)."""

    spec: str
    library: tuple[str, ...]
    transpose: bool = False
    optional: bool = False
    reshape: bool = False
    layer: tuple[int, int] = (1, 0)


@dataclass(frozen=True)
class WeightMap:
    """The links of one library model family; ``repeated`` links hold ``{i}`` and repeat per layer."""

    name: str
    links: tuple[Link, ...]
    ignore: tuple[str, ...] = ()  # library keys that hold no weight of the model (buffers such as inv_freq)

    def expand(self, layers: int) -> list[Link]:
        out = []
        for link in self.links:
            if "{i}" in link.spec:
                k, o = link.layer
                out += [replace(link, spec=link.spec.format(i=i),
                                library=tuple(key.format(i=k * i + o) for key in link.library))
                        for i in range(layers)]
            else:
                out.append(link)
        return out

    def to_spec(self, library: Mapping, layers: int, shapes: Mapping | None = None) -> dict:
        """The spec's state_dict from the library's; ``shapes`` (the spec's state_dict, or its shapes) give a
        reshaping link its target."""
        import torch

        out, used = {}, set()
        for link in self.expand(layers):
            present = [k in library for k in link.library]
            if not all(present):
                if link.optional and not any(present):
                    continue
                missing = [k for k, p in zip(link.library, present) if not p]
                raise WeightMapError(f"{self.name}: the library state_dict has no {', '.join(missing)} "
                                     f"(for the spec's {link.spec})")
            parts = [library[k] for k in link.library]
            t = torch.cat(parts) if len(parts) > 1 else parts[0]
            t = t.t() if link.transpose else t
            out[link.spec] = self._reshaped(link, link.spec, t, shapes, "spec") if link.reshape else t
            used.update(link.library)
        extra = sorted(k for k in library if k not in used and not _ignored(k, self.ignore))
        if extra:
            raise WeightMapError(f"{self.name}: the map places no spec tensor for the library's {', '.join(extra)}")
        return out

    def to_library(self, spec: Mapping, layers: int, shapes: Mapping | None = None) -> dict:
        """The library's state_dict from the spec's; ``shapes`` (the library's state_dict, or its shapes) split
        a stacked tensor by the rows of each part, else it is split evenly."""
        out, used = {}, set()
        for link in self.expand(layers):
            if link.spec not in spec:
                if link.optional:
                    continue
                raise WeightMapError(f"{self.name}: the spec state_dict has no {link.spec}")
            t = spec[link.spec]
            t = t.t() if link.transpose else t
            if link.reshape:
                t = self._reshaped(link, link.library[0], t, shapes, "library")
            if len(link.library) == 1:
                pieces = [t]
            else:
                rows = [_rows(shapes[k]) for k in link.library] if shapes is not None else None
                if rows is not None and sum(rows) != t.shape[0]:
                    raise WeightMapError(f"{self.name}: {link.spec} has {t.shape[0]} rows, the library's "
                                         f"{', '.join(link.library)} {sum(rows)}")
                pieces = t.split(rows) if rows is not None else t.chunk(len(link.library))
            for k, piece in zip(link.library, pieces):
                if k in out and not (out[k].shape == piece.shape and bool((out[k] == piece).all())):
                    raise WeightMapError(f"{self.name}: {k} is made of two spec tensors that differ")
                out[k] = piece.contiguous()
            used.add(link.spec)
        extra = sorted(k for k in spec if k not in used)
        if extra:
            raise WeightMapError(f"{self.name}: the map places no library tensor for the spec's {', '.join(extra)}")
        return out


    def _reshaped(self, link: Link, key: str, t, shapes: Mapping | None, side: str):
        """``t`` reshaped to the shape of ``key`` in ``shapes`` (the target side's state_dict or shapes)."""
        if len(link.library) != 1:
            raise WeightMapError(f"{self.name}: {link.spec} reshapes one library tensor, not a stack")
        if shapes is None or key not in shapes:
            raise WeightMapError(f"{self.name}: {link.spec} is reshaped; pass the {side}'s state_dict (shapes) to "
                                 f"give {key} its shape")
        shape = tuple(shapes[key]) if isinstance(shapes[key], (tuple, list)) else tuple(shapes[key].shape)
        if t.numel() != _numel(shape):
            raise WeightMapError(f"{self.name}: {link.spec} has {t.numel()} entries, the {side}'s {key} {shape}")
        return t.reshape(shape)


def _numel(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _rows(t) -> int:
    return int(t[0] if isinstance(t, (tuple, list)) else t.shape[0])


def _ignored(key: str, patterns: tuple[str, ...]) -> bool:
    return any(key.endswith(p) for p in patterns)


def _shipped() -> dict[str, WeightMap]:
    """Every shipped map by name: each module of ``weight_maps`` declares ``MAPS`` (a spec file's models)."""
    from rpn2c.frontends import weight_maps

    maps: dict[str, WeightMap] = {}
    for module in pkgutil.iter_modules(weight_maps.__path__):
        maps.update(importlib.import_module(f"rpn2c.frontends.weight_maps.{module.name}").MAPS)
    return maps


def available() -> list[str]:
    """The names of the shipped weight maps."""
    return sorted(_shipped())


def get(name: str) -> WeightMap:
    """The shipped map ``name`` (one of :func:`available`)."""
    maps = _shipped()
    if name not in maps:
        raise WeightMapError(f"no weight map named {name!r}; the maps are {', '.join(sorted(maps))}")
    return maps[name]


def to_spec(name: str, library: Mapping, layers: int, shapes: Mapping | None = None) -> dict:
    """The spec's state_dict from a library model's, by the shipped map ``name`` (``shapes``: the spec's
    state_dict, for the links that reshape)."""
    return get(name).to_spec(library, layers, shapes)


def to_library(name: str, spec: Mapping, layers: int, shapes: Mapping | None = None) -> dict:
    """A library model's state_dict from the spec's, by the shipped map ``name`` (``shapes``: the library's
    state_dict, to split stacked tensors of unequal parts such as grouped-query k/v)."""
    return get(name).to_library(spec, layers, shapes)
