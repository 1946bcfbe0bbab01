"""The component registry and every component family. A family's module is imported when one of its names is
first read (``registry.Family``, through ``index.INDEX``), or with all the others when the registry is listed
(``registry.load_all``); ``MODULES`` names them all, in the order they register their components."""

from rpn2c.components.registry import MODULES, REGISTRY, Entry, all_entries, load_all, lookup, names

__all__ = ["MODULES", "REGISTRY", "Entry", "all_entries", "load_all", "lookup", "names"]
