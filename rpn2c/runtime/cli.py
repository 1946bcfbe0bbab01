"""The ``rpn2c`` command line. Exit status: 0 ok, 1 spec errors, 2 usage errors."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rpn2c.errors import SpecError

from rpn2c.runtime.common import (EXIT_OK, EXIT_SPEC, EXIT_USAGE, _err, _out, _read, _Usage,  # noqa: F401
                                  add_spec_command)


def _graph(args):
    from rpn2c.api import check_file
    from rpn2c.passes import optimize

    _read(args.spec)
    return optimize(check_file(args.spec, model=args.model, root=args.root))


# --------------------------------------------------------------------------------------------------- commands
def cmd_check(args) -> int:
    from rpn2c.runtime.report import layer_table

    graph = _graph(args)
    if args.format == "json":
        _out(json.dumps({"ok": True, "model": graph.name, "params": graph.param_count,
                         "hash": graph.content_hash(), "nodes": layer_table(graph)}, indent=2))
        return EXIT_OK
    from rpn2c.runtime.report import render_table

    _out(f"ok: {args.spec}: model {graph.name}, {graph.param_count:,} parameters, hash {graph.content_hash()[:12]}")
    _out(render_table(graph))
    return EXIT_OK


def cmd_graph(args) -> int:
    from rpn2c.runtime.export import to_dot, to_mermaid

    graph = _graph(args)
    text = {"dot": to_dot, "mermaid": to_mermaid, "json": lambda g: g.to_json(indent=2, kernels=True)}[args.format](graph)
    _out(text.rstrip("\n"))
    return EXIT_OK


def cmd_explain(args) -> int:
    from rpn2c.runtime.explain import explain_text

    _out(explain_text(_graph(args), args.format))
    return EXIT_OK


def cmd_fmt(args) -> int:
    from rpn2c.syntax.format import format_program
    from rpn2c.syntax.parser import parse

    text = _read(args.spec)
    formatted = format_program(parse(text, args.spec))
    if args.check:
        if formatted != text:
            _err(f"{args.spec}: not in canonical form (run `rpn2c fmt --write {args.spec}`)")
            return EXIT_SPEC
        return EXIT_OK
    if args.write:
        if formatted != text:
            Path(args.spec).write_text(formatted, encoding="utf-8")
        return EXIT_OK
    sys.stdout.write(formatted)
    return EXIT_OK


def cmd_components(args) -> int:
    from rpn2c.components.registry import FAMILIES
    from rpn2c.runtime.report import components_json, components_table

    if args.family is not None and args.family not in FAMILIES:
        raise _Usage(f"unknown family {args.family!r} (families: {', '.join(FAMILIES)})")
    if args.format == "json":
        _out(json.dumps(components_json(args.family), indent=2))
    elif args.format == "markdown":
        from rpn2c.runtime.docgen import render_components_markdown

        sys.stdout.write(render_components_markdown(args.family))
    else:
        _out(components_table(args.family))
    return EXIT_OK


# --------------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rpn2c", description="Compiler for RPN 2 model specs (.rpn files).")
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def spec_cmd(name, help_, fn):
        return add_spec_command(sub, name, help_, fn)

    s = spec_cmd("check", "check a spec: per-layer shapes and parameter counts, or every error found", cmd_check)
    s.add_argument("--format", choices=["table", "json"], default="table")
    s = spec_cmd("graph", "print the IR graph", cmd_graph)
    s.add_argument("--format", choices=["dot", "mermaid", "json"], default="dot")
    s = spec_cmd("explain", "show the optimiser's decisions: rules fired per layer, where they are defined, "
                            "kernels and estimated cost", cmd_explain)
    s.add_argument("--format", choices=["text", "json"], default="text")
    s = sub.add_parser("fmt", help="print the canonical form of a spec", description="print the canonical form")
    s.add_argument("spec")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="exit 1 if the file is not in canonical form")
    g.add_argument("--write", action="store_true", help="rewrite the file in place")
    s.set_defaults(fn=cmd_fmt)
    s = sub.add_parser("components", help="list every component function", description="list components")
    s.add_argument("--format", choices=["table", "json", "markdown"], default="table",
                   help="markdown: the text of docs/components.md")
    s.add_argument("--family", help="only this family (expansion, compression, reconciliation, ...)")
    s.set_defaults(fn=cmd_components)
    _extend(sub)
    return p


def _extend(sub) -> None:
    """Commands contributed by later stages (train, eval, predict, show) register here."""
    from rpn2c.runtime import train_cli

    train_cli.register(sub)


def _version() -> str:
    from rpn2c import __version__

    return f"rpn2c {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return args.fn(args)
    except _Usage as exc:
        _err(f"rpn2c: error: {exc}")
        return EXIT_USAGE
    except SpecError as exc:
        _err(exc.render(color=sys.stderr.isatty()))
        n = len(exc.diagnostics)
        _err(f"{n} error{'s' if n != 1 else ''} found")
        return EXIT_SPEC
    except BrokenPipeError:  # pragma: no cover - `rpn2c ... | head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
