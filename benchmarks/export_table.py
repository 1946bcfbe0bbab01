"""The export table: every model of every shipped spec through ``rpn2c export --random-init`` in each format, with
the dims that stayed dynamic, the static ones and why, and the seconds each export took (trace, write, load back
and check, in this process: imports and the first model build excluded by a warm-up export).

    python -m benchmarks.export_table [--format pt2 --format onnx] [--only NAME ...] > table.md
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = ("specs/*.rpn", "specs/paper/*.rpn", "examples/specs/*.rpn")


def shipped() -> list[tuple[Path, str]]:
    """(spec file, model name) of every model in the shipped specs, in path order."""
    from rpn2c.syntax.parser import parse

    out = []
    for path in sorted(p for pattern in PATTERNS for p in ROOT.glob(pattern)):
        program = parse(path.read_text(encoding="utf-8"), str(path))
        out += [(path, d.name) for d in program.definitions if d.kind == "model"]
    return out


def export_once(path: Path, model: str, fmt: str, folder: Path) -> dict:
    """One ``rpn2c export``: exit code, seconds, dynamic dims, static notes, error line, files left."""
    from rpn2c.runtime.cli import main

    target = folder / f"{model}.{fmt}"
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["export", str(path), "--model", model, "--random-init", "--format", fmt, "--out", str(target)])
    seconds = time.perf_counter() - start
    dynamic: list[str] = []
    for line in out.getvalue().splitlines():
        for part in re.findall(r"\(dynamic (.*?)(?:, fixed .*)?\)$", line):
            dynamic += [d for d in part.split(", ") if d not in dynamic]
    static = [m.group(1) for m in re.finditer(r"^  static (.*?):", out.getvalue(), re.M)]
    left = sorted(p.name for p in folder.iterdir())
    for p in folder.iterdir():
        p.unlink()
    return {"code": code, "seconds": seconds, "dynamic": dynamic, "static": static,
            "error": err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "", "left": left}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", action="append", choices=["pt2", "onnx"])
    parser.add_argument("--only", action="append", metavar="NAME", help="models or spec stems to run (repeatable)")
    args = parser.parse_args(argv)
    formats = args.format or ["pt2", "onnx"]
    cases = [(p, m) for p, m in shipped() if not args.only or m in args.only or p.stem in args.only]
    print("| spec | model | format | ok | dynamic | static | seconds |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        export_once(ROOT / "specs" / "mlp.rpn", "mlp", formats[0], folder)  # warm-up: imports, first build
        for path, model in cases:
            for fmt in formats:
                r = export_once(path, model, fmt, folder)
                ok = "ok" if r["code"] == 0 and r["left"] == [f"{model}.{fmt}"] else f"FAILED ({r['error']})"
                print(f"| {path.relative_to(ROOT).as_posix()} | {model} | {fmt} | {ok} | {', '.join(r['dynamic'])} "
                      f"| {', '.join(r['static'])} | {r['seconds']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
