"""Fuzzing the commands that take a spec that checked further: ``rpn2c export`` (pt2, and ONNX where onnx and
onnxscript are installed), ``rpn2c show`` (the matrix view as JSON, the §10 bounds, a picture) and ``rpn2c explain``,
each run as a user runs it (``rpn2c.runtime.cli.main``, in this process, output captured) on the spec in a temporary
folder, under a time limit.

A command ends well with exit status 0, or 1 with a message for the user: a located spec error, ``rpn2c: error:``
naming what it cannot do (an edge list that ``show`` cannot make up, a component ``torch.export`` cannot trace,
declared by the component). Anything else is a failure: an exception escaping the command (a traceback), a usage
error for arguments the harness chose well, ``explain`` refusing a spec that checked, an export that traced but
fails its own check, or a failed export that leaves its file behind. Failures another change is fixing are
``known`` (:data:`KNOWN`): counted apart, never minimised.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import tempfile
import traceback
from pathlib import Path

from rpn2c.runtime.fuzz import Outcome, Timeout, _site, alarm

SPEC_ENTRIES = ("export", "show", "explain")
#: (entry point, pattern of the failure kind): failures another change is fixing
KNOWN = (
    ("export", re.compile(r"Guard failed: args_\w+\.size\(\)")),  # the parallel scan's shape specialisation
    ("export", re.compile(r"file left behind after a refused export")),  # a failed export's program on disk
)
_TORCH_TRACE = re.compile(r"torch\.export cannot trace model '[^']*': ")
_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")  # terminal colours in torch's messages
_PATHS = re.compile(r"(?<![\w.])/[^\s:'\",]+")  # a file's path (a fresh temporary folder each run)
_NUMBERS = re.compile(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b")


def _onnx_installed() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        return False
    return True


def known(entry: str, kind: str) -> bool:
    """Whether a failure of ``entry`` with ``kind`` is one another change is fixing (:data:`KNOWN`)."""
    return any(e == entry and p.search(kind) for e, p in KNOWN)


def _kind(text: str) -> str:
    """A message's first line with its numbers and quoted names blanked: one kind per kind of failure."""
    text = _PATHS.sub("…", _ESCAPES.sub("", text))
    line = text.strip().splitlines()[0] if text.strip() else "no message"
    return _NUMBERS.sub("N", re.sub(r"'[^']*'", "'…'", line))[:160]


def run_cli(argv: list[str], time_limit: float) -> tuple[int | None, str, str, BaseException | None]:
    """``rpn2c ARGV`` in this process: (exit status or None, stdout, stderr, the exception that escaped it)."""
    from rpn2c.runtime.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with alarm(time_limit), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
        return rc, out.getvalue(), err.getvalue(), None
    except (KeyboardInterrupt, Timeout):
        raise
    except BaseException as exc:  # noqa: BLE001 - an exception escaping a command is what is looked for
        return None, out.getvalue(), err.getvalue(), exc


def _plan(entry: str, seed: int, folder: Path) -> list[str]:
    """The command line of ``entry`` for input ``seed`` (its options drawn from the seed)."""
    rng = random.Random(seed * 7 + len(entry))
    spec = str(folder / "fuzz.rpn")
    if entry == "export":
        fmt = "onnx" if _onnx_installed() and rng.random() < 0.25 else "pt2"
        argv = ["export", spec, "--random-init", "--format", fmt, "--out", str(folder / f"fuzz.{fmt}")]
        return argv + (["--static"] if rng.random() < 0.15 else []) + (["--dtype", "float64"] if rng.random() < 0.2
                                                                         else [])
    if entry == "show":
        r = rng.random()
        if r < 0.55:
            return ["show", spec, "--format", "json"]
        if r < 0.8:
            return ["show", spec, "--bounds"]
        if r < 0.9:
            return ["show", spec, "--view", "xi", "--format", "json"]
        return ["show", spec, "--out", str(folder / "pictures")]
    return ["explain", spec] + (["--format", "json"] if rng.random() < 0.3 else [])


def run_entry(entry: str, source: str | bytes, seed: int, time_limit: float = 60.0) -> Outcome:
    """Run ``entry`` (export, show or explain) on ``source`` (a spec that checked): see the module docstring."""
    with tempfile.TemporaryDirectory(prefix="rpn2c-fuzz-") as tmp:
        folder = Path(tmp)
        (folder / "fuzz.rpn").write_bytes(source if isinstance(source, bytes) else source.encode("utf-8"))
        argv = _plan(entry, seed, folder)
        try:
            rc, _, err, exc = run_cli(argv, time_limit)
        except Timeout:
            return _classify(entry, Outcome("failure", f"{entry}: timeout ({_kind(' '.join(argv[2:]))})"))
        finally:
            _reset_torch_export()
        if exc is not None:
            trace = "".join(traceback.format_exception(exc, limit=-8))
            return _classify(entry, Outcome("failure", f"{entry}: {_site(exc)}: {_kind(str(exc))}", trace))
        return _classify(entry, _judge(entry, rc, err, argv))


def _judge(entry: str, rc: int, err: str, argv: list[str]) -> Outcome:
    written = Path(argv[argv.index("--out") + 1]) if "--out" in argv and entry == "export" else None
    if rc == 0:
        return Outcome("ok")
    o = _refusal(entry, rc, err)
    if written is None or not written.exists():
        return o
    if o.status == "ok":  # a clear refusal, but its program is on disk
        return Outcome("failure", f"export: file left behind after a refused export ({o.detail})", err[-3000:])
    return Outcome(o.status, f"{o.detail} (and its file left behind)", o.trace)


def _refusal(entry: str, rc: int, err: str) -> Outcome:
    """What a command that did not succeed (exit ``rc``, messages ``err``) amounts to."""
    message = err.strip().splitlines()
    first = next((line for line in message if "error" in line), message[0] if message else "")
    first = first.removeprefix("rpn2c: error: ")
    if rc == 2:
        return Outcome("failure", f"{entry}: usage error: {_kind(first)}", err[-3000:])
    if rc != 1 or "Traceback" in err:
        return Outcome("failure", f"{entry}: exit {rc}: {_kind(first)}", err[-3000:])
    if "error[E" in err:
        if entry == "explain":
            return Outcome("failure", f"explain: refuses a spec that checked: {_kind(first)}", err[-3000:])
        return Outcome("ok", "refused: located spec error")
    if entry == "export":
        if "which torch.export cannot trace" in err:  # a component's declared compile limitation
            return Outcome("ok", "refused: declared compile limitation")
        if "onnx" in first.lower() and "onnxruntime cannot run it" not in first:
            return Outcome("failure", f"export onnx: {_kind(first)}", err[-3000:])
        return Outcome("failure", f"export: {_kind(_TORCH_TRACE.sub('', first))}", err[-3000:])
    if entry == "show" and message and message[-1].startswith("rpn2c: error:"):
        return Outcome("ok", f"refused: {_kind(first)[:80]}")
    return Outcome("failure", f"{entry}: exit 1: {_kind(first)}", err[-3000:])


def _classify(entry: str, o: Outcome) -> Outcome:
    return Outcome("known", o.detail, o.trace) if o.status == "failure" and known(entry, o.detail) else o


def _reset_torch_export() -> None:
    """Forget what ``torch.export`` traced (its caches would grow over a long lane)."""
    import sys

    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()
