"""The ``rpn2c`` command line. Exit status: 0 ok, 1 spec errors, 2 usage errors."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rpn2c.errors import SpecError

from rpn2c.runtime.common import (EXIT_OK, EXIT_SPEC, EXIT_USAGE, _err, _out, _read, _Usage,  # noqa: F401
                                  add_spec_command, budget_limits, parse_params, unreadable)


def _graph(args):
    """The optimised graph of ``args.spec`` (``-``: standard input, imports relative to the current folder) with
    the ``--param`` model parameters."""
    from rpn2c.api import check
    from rpn2c.check.loader import read_spec
    from rpn2c.passes import optimize

    limits = budget_limits(args)
    if args.spec == "-":
        root = Path(args.root or ".")
        text, file, path = sys.stdin.buffer.read(), "<stdin>", root / "<stdin>"
    else:
        file, path, root = args.spec, Path(args.spec), args.root
        try:
            text = read_spec(path)
        except OSError as exc:
            raise unreadable(args.spec, exc) from None
    params = parse_params(args.param) or None
    return optimize(check(text, file, model=args.model, path=path, root=root, params=params, limits=limits))


# --------------------------------------------------------------------------------------------------- commands
def cmd_check(args) -> int:
    from rpn2c.runtime.report import layer_table

    try:
        graph = _graph(args)
    except SpecError as exc:  # json: the diagnostics on standard output, for tools
        if args.format != "json":
            raise
        _out(json.dumps({"ok": False, "diagnostics": exc.to_json()}, indent=2))
        _err(f"{len(exc.diagnostics)} error{'s' if len(exc.diagnostics) != 1 else ''} found")
        return EXIT_SPEC
    if args.compile:
        from rpn2c.runtime.report import compile_limitations

        limits = compile_limitations(graph)
    if args.format == "json":
        extra = {"compile_limitations": limits} if args.compile else {}
        _out(json.dumps({"ok": True, "model": graph.name, "params": graph.param_count,
                         "hash": graph.content_hash(), "nodes": layer_table(graph), **extra}, indent=2))
        return EXIT_OK
    from rpn2c.runtime.report import render_table

    _out(f"ok: {args.spec}: model {graph.name}, {graph.param_count:,} parameters, hash {graph.content_hash()[:12]}")
    _out(render_table(graph))
    if args.compile:  # what torch.compile(fullgraph=True) cannot compile (torch limitations, from the registry)
        _out("torch.compile(fullgraph=True): " + ("no known limitation" if not limits else
             f"{len(limits)} component use(s) cannot be compiled as one graph"))
        for lim in limits:
            _out(f"  {lim['node']}: {lim['component']} ({lim['family']}): {lim['reason']}")
    return EXIT_OK


def cmd_graph(args) -> int:
    from rpn2c.runtime.export import to_dot, to_mermaid, to_png, to_svg

    if args.format == "png" and args.out is None and sys.stdout.isatty():
        raise _Usage("--format png writes binary data: give --out FILE.png or redirect standard output")
    graph = _graph(args)
    if args.collapse and args.format not in ("svg", "png"):
        raise _Usage("--collapse applies to pictures: --format svg or png")
    if args.format == "png":
        data = to_png(graph, collapse=args.collapse)
    else:
        data = ({"dot": to_dot, "mermaid": to_mermaid, "svg": lambda g: to_svg(g, collapse=args.collapse),
                 "json": lambda g: g.to_json(indent=2, kernels=True)}[args.format](graph).rstrip("\n")
                + "\n").encode("utf-8")
    if args.out is not None:  # say what went where: nothing else is printed
        Path(args.out).write_bytes(data)
        what = " (one box per block use or repeat)" if args.collapse else ""
        _err(f"wrote {args.out}: {_GRAPH_FORMATS[args.format]} of model {graph.name}{what}, {len(data):,} bytes")
    elif args.format == "png":
        sys.stdout.buffer.write(data)
    else:
        sys.stdout.write(data.decode("utf-8"))
    return EXIT_OK


_GRAPH_FORMATS = {"dot": "Graphviz DOT", "mermaid": "Mermaid flowchart", "json": "IR graph as JSON",
                  "svg": "SVG picture", "png": "PNG picture"}


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
    from rpn2c.runtime.report import component_text, components_json, components_table, find_components

    if args.family is not None and args.family not in FAMILIES:
        raise _Usage(f"unknown family {args.family!r} (families: {', '.join(FAMILIES)})")
    if args.name is not None:  # one entry in full (every family's entry of that name), example included
        found, hint = find_components(args.name, args.family)
        if not found:
            raise _Usage(f"unknown component {args.name!r}" + (f"; {hint}" if hint else ""))
        if args.format == "json":
            _out(json.dumps(components_json(entries=found), indent=2))
        else:
            _out("\n\n".join(component_text(e) for e in found))
        return EXIT_OK
    if args.format == "json":
        _out(json.dumps(components_json(args.family), indent=2))
    elif args.format == "markdown":
        from rpn2c.runtime.docgen import render_components_markdown

        sys.stdout.write(render_components_markdown(args.family))
    else:
        _out(components_table(args.family))
    return EXIT_OK


def cmd_data(args) -> int:
    from rpn2c.data.catalog import FILE_KINDS, catalog

    rows = catalog()
    if args.format == "json":
        _out(json.dumps(rows, indent=2))
        return EXIT_OK
    table = [("name", "task", "input", "outputs", "ships in")]
    for r in rows:
        k = r.get("classes", r.get("target_dim"))
        out = f"{k} classes" if "classes" in r else f"{k} target{'s' if k > 1 else ''}"
        table.append((r["name"], r["task"], r["input"], out, r["package"]))
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    for k, t in enumerate(table):
        _out("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip())
        if k == 0:
            _out("  ".join("-" * w for w in widths))
    _out(f"\nrpn2c train SPEC --data NAME; or --data KIND:PATH for your files (KIND: {', '.join(FILE_KINDS)})")
    return EXIT_OK


# --------------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rpn2c", description="Compiler for RPN 2 model specs (.rpn files).")
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def spec_cmd(name, help_, fn):
        return add_spec_command(sub, name, help_, fn)

    s = spec_cmd("check", "check a spec: per-layer shapes and parameter counts, or every error found", cmd_check)
    s.add_argument("--format", choices=["table", "json"], default="table",
                   help="json: the graph, or {ok: false, diagnostics: [{code, message, file, line, col, end, help}]}")
    s.add_argument("--compile", action="store_true",
                   help="also report the components torch.compile(fullgraph=True) cannot compile, and why")
    s = spec_cmd("graph", "print the IR graph, or draw it (svg, png: shapes on the edges, kernels chosen)",
                 cmd_graph)
    s.add_argument("--format", choices=["dot", "mermaid", "json", "svg", "png"], default="dot")
    s.add_argument("--collapse", action="store_true",
                   help="svg, png: draw each block use as one box (default: its nodes, framed and labelled)")
    s.add_argument("--out", metavar="FILE", help="write to FILE (default: standard output)")
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
    s.add_argument("name", nargs="?", help="show this component in full, with its runnable example")
    s.add_argument("--format", choices=["table", "json", "markdown"], default="table",
                   help="markdown: the text of docs/components.md")
    s.add_argument("--family", help="only this family (expansion, compression, reconciliation, ...)")
    s.set_defaults(fn=cmd_components)
    s = sub.add_parser("data", help="list the built-in data sets: task, input type, classes",
                       description="list the built-in data sets (nothing is downloaded)")
    s.add_argument("--format", choices=["table", "json"], default="table")
    s.set_defaults(fn=cmd_data)
    _extend(sub)
    return p


def _extend(sub) -> None:
    """Commands contributed by later stages (train, eval, predict, show, lsp) register here."""
    from rpn2c.runtime import export_cli, predict_cli, show, train_cli

    train_cli.register(sub)
    predict_cli.register(sub)
    show.register(sub)
    s = sub.add_parser("lsp", help="run the language server for editors (stdin/stdout)",
                       description="run the language server for .rpn files on stdin/stdout")
    s.add_argument("--stdio", action="store_true", help="accepted for editors that pass it; stdio is the default")
    s.set_defaults(fn=cmd_lsp)
    export_cli.register(sub)


def cmd_lsp(args) -> int:
    """The language server on stdin/stdout (its modules imported only by this command)."""
    from rpn2c.runtime.lsp import cmd_lsp as serve

    if sys.stdin.isatty():  # typed at a terminal: say why nothing happens
        _err("rpn2c lsp: the language server reads LSP messages on standard input from an editor's client (see "
             "the README's Editor support); waiting for one, Ctrl-D ends it")
    return serve(args)


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
    except OSError as exc:  # a path given to an option (--out) that cannot be made or written
        if not exc.filename:
            raise
        why = "a file of that name is in the way" if isinstance(exc, FileExistsError) else exc.strerror or exc
        _err(f"rpn2c: error: cannot write {exc.filename}: {why}")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
