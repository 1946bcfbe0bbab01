"""What every ``rpn2c`` sub-command shares: exit codes, output, reading a spec, the spec sub-command options."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_SPEC, EXIT_USAGE = 0, 1, 2


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise unreadable(path, exc) from None


def unreadable(path: str, exc: Exception) -> "_Usage":
    """The usage error for a spec file that cannot be read; ``specs/cnn`` for ``specs/cnn.rpn`` names the file."""
    hint = f"; did you mean {path}.rpn?" if Path(f"{path}.rpn").is_file() else ""
    return _Usage(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}{hint}")


class _Usage(Exception):
    pass


def parse_dims(items: list[str] | None) -> dict[str, int]:
    """``--dim NAME=SIZE`` options (sizes of symbolic dimensions, each >= 1) as a dict."""
    dims = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.isdigit() or int(value) < 1:
            raise _Usage(f"--dim {item}: expected NAME=SIZE (e.g. B=32, T=100)")
        dims[key] = int(value)
    return dims


def param_value(text: str):
    """A ``--param`` value: int, float, true/false, a [list], else the string itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.startswith("["):
        import yaml

        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = None
        if isinstance(value, list):
            return value
    return text


def parse_params(items: list[str] | None) -> dict:
    """``--param NAME=VALUE`` options (model parameters, as ``rpn2c.check``'s ``params=``) as a dict."""
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value:
            raise _Usage(f"--param {item}: expected NAME=VALUE (e.g. --param hidden=64)")
        out[key.strip()] = param_value(value)
    return out


def _size(text: str) -> int:
    from rpn2c.check.budget import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_spec_options(s: argparse.ArgumentParser) -> None:
    """``--model``, ``--root`` and ``--param``: which model of a spec file, and with which parameters; the resource
    budgets ``--max-params``, ``--max-memory`` and ``--max-work`` the check (and, with the inputs' sizes, the
    compiled model) holds it to."""
    s.add_argument("--model", help="which model of the file (default: the last one)")
    s.add_argument("--root", help="project root that imports may not leave (default: the spec's folder)")
    s.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="model parameter, as rpn2c.check's params= (e.g. hidden=64); repeatable")
    s.add_argument("--max-params", type=_size, metavar="N", help="parameter budget (default 1e9)")
    s.add_argument("--max-memory", type=_size, metavar="BYTES",
                   help="activation memory per sample, e.g. 16GB (default 4GiB); held again at run time with the "
                        "inputs' sizes")
    s.add_argument("--max-work", type=_size, metavar="N",
                   help="nodes and heads the check may expand, and steps a forward pass runs one after another (a "
                        "graph ξ's hops) (default 20000)")


def budget_limits(args) -> dict:
    """The budgets given on the command line (``--max-…``), as ``rpn2c.check``'s ``limits=``."""
    return {k: v for k in ("max_params", "max_memory", "max_work") if (v := getattr(args, k, None)) is not None}


def add_spec_command(sub, name: str, help_: str, fn) -> argparse.ArgumentParser:
    """A sub-command taking a spec file, with the shared ``--model``, ``--root`` and ``--param`` options."""
    s = sub.add_parser(name, help=help_, description=help_)
    s.add_argument("spec", help="path to a .rpn file")
    add_spec_options(s)
    s.set_defaults(fn=fn)
    return s
