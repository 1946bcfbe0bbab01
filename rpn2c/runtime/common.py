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
        raise _Usage(f"cannot read {path}: {exc}") from None


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


def add_spec_command(sub, name: str, help_: str, fn) -> argparse.ArgumentParser:
    """A sub-command taking a spec file, with the shared ``--model`` and ``--root`` options."""
    s = sub.add_parser(name, help=help_, description=help_)
    s.add_argument("spec", help="path to a .rpn file")
    s.add_argument("--model", help="which model of the file (default: the last one)")
    s.add_argument("--root", help="project root that imports may not leave (default: the spec's folder)")
    s.set_defaults(fn=fn)
    return s
