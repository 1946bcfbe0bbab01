"""How long an editor waits for ``rpn2c lsp``: measured over real LSP messages against fresh server processes,
never asserted in tests (``tests/test_lsp.py`` checks the ordering these figures rest on).

Each run starts a server the way an editor does (``initialize``, then ``initialized`` and ``didOpen``) and records:

- *initialize*: from starting the process to the ``initialize`` answer;
- *first diagnostic*: from starting the process to the first ``publishDiagnostics`` of ``specs/cnn.rpn``, and the
  server's CPU time by then (on a machine shared with other work, close to the wall clock of an idle one);
- *keystroke, idle*: from a ``didChange`` to the diagnostics of that version (the debounce, 150 ms, included);
- *code lenses resolved*: ``specs/transformer.rpn``'s code lenses asked for and each resolved, as an editor does
  on opening a file (the first heavy requests: the server starts its worker);
- *viewOutput*: then the first ``rpn2c.viewOutput`` of the session (a code lens's command: explain and generated
  code, which imports torch and builds the model);
- *keystroke during viewOutput*: a ``didChange`` every 0.5 s while that first ``viewOutput`` is in flight, each to
  its diagnostics; *hover during viewOutput*: a hover on a value half-way between two keystrokes (it checks the new
  text and runs the optimiser for the value's kernels).

Medians with the range over ``--runs`` servers::

    python benchmarks/lsp_latency.py --runs 7
    taskset -c 0,1 python benchmarks/lsp_latency.py --runs 7            # on two cores of a larger machine
    python benchmarks/lsp_latency.py --worker thread                     # heavy requests on a thread instead
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rpn2c.runtime.lsp_wire import read_message, write_message  # noqa: E402

CNN = ROOT / "specs" / "cnn.rpn"
TRANSFORMER = ROOT / "specs" / "transformer.rpn"
KEYSTROKE_EVERY = 0.5  # a pause in typing: a keystroke, then a hover half-way to the next


class Server:
    """A ``rpn2c lsp`` process and every message it sent, each with the time it arrived."""

    def __init__(self, options: dict):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "rpn2c", "lsp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, cwd=ROOT, env=env)
        self.received: list[tuple[float, dict]] = []
        self.cpu: float | None = None  # the server's CPU time when its first diagnostics arrived
        self.arrived = threading.Condition()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.initialized = self.wait(self.request("initialize", {
            "processId": os.getpid(), "rootUri": ROOT.as_uri(), "capabilities": {},
            "initializationOptions": options}))[0] - self.started
        self.notify("initialized", {})

    def _read(self) -> None:
        while (message := read_message(self.proc.stdout)) is not None:
            if self.cpu is None and message.get("method") == "textDocument/publishDiagnostics":
                self.cpu = cpu_seconds(self.proc.pid)
            with self.arrived:
                self.received.append((time.monotonic(), message))
                self.arrived.notify_all()

    def notify(self, method: str, params: dict) -> float:
        sent = time.monotonic()
        write_message(self.proc.stdin, {"method": method, "params": params})
        return sent

    def request(self, method: str, params: dict):
        self.next_id += 1
        ident = self.next_id
        write_message(self.proc.stdin, {"id": ident, "method": method, "params": params})
        return lambda m: m.get("id") == ident and "method" not in m

    def wait(self, match, timeout: float = 120) -> tuple[float, dict]:
        """The first message ``match`` accepts: its arrival time and the message."""
        with self.arrived:
            ok = self.arrived.wait_for(lambda: any(match(m) for _, m in self.received), timeout)
            if not ok:
                raise TimeoutError("no answer")
            return next((t, m) for t, m in self.received if match(m))

    def open(self, path: Path, text: str) -> float:
        """Open ``path`` with ``text``: when its first diagnostics arrived."""
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": path.as_uri(), "languageId": "rpn", "version": 1, "text": text}})
        return self.wait(published(path, 1))[0]

    def close(self) -> None:
        self.wait(self.request("shutdown", {}))
        self.notify("exit", {})
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU time of process ``pid`` (Linux), which a shared machine's load does not inflate much."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def published(path: Path, version: int):
    """Diagnostics of ``path`` at ``version`` or later (a later keystroke within the debounce merges with it)."""
    uri = path.as_uri()
    return lambda m: (m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri
                      and (m["params"].get("version") or 0) >= version)


def one_run(options: dict) -> dict:
    server = Server(options)
    try:
        first = server.open(CNN, CNN.read_text(encoding="utf-8")) - server.started
        text = TRANSFORMER.read_text(encoding="utf-8")
        server.open(TRANSFORMER, text)
        variants = [text.replace("out = ffn", "out = nope"), text]  # each keystroke changes the diagnostics

        def keystroke(version: int) -> tuple[float, object]:
            sent = server.notify("textDocument/didChange", {
                "textDocument": {"uri": TRANSFORMER.as_uri(), "version": version},
                "contentChanges": [{"text": variants[version % 2]}]})
            return sent, published(TRANSFORMER, version)

        lens_sent = time.monotonic()  # as an editor does on opening: the lenses, then each one resolved
        lenses = server.wait(server.request("textDocument/codeLens", {"textDocument": {"uri": TRANSFORMER.as_uri()}}))
        resolved = [server.request("codeLens/resolve", lens) for lens in lenses[1]["result"]]
        lens_done = max(server.wait(r)[0] for r in resolved)
        line, col = next((i, ln.index("attn")) for i, ln in enumerate(text.splitlines()) if "attn = head" in ln)
        view_sent = time.monotonic()
        view = server.request("workspace/executeCommand", {
            "command": "rpn2c.viewOutput", "arguments": [TRANSFORMER.as_uri(), line, col]})
        during, hovers, version = [], [], 2
        while not any(view(m) for _, m in server.received):
            time.sleep(KEYSTROKE_EVERY / 2)
            if any(view(m) for _, m in server.received):
                break
            during.append(keystroke(version))
            version += 1
            time.sleep(KEYSTROKE_EVERY / 2)
            hover_sent = time.monotonic()
            hovers.append((hover_sent, server.request("textDocument/hover", {
                "textDocument": {"uri": TRANSFORMER.as_uri()}, "position": {"line": line, "character": col}})))
        view_done, answer = server.wait(view)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        during_s = [server.wait(m)[0] - s for s, m in during]
        hover_s = [server.wait(m)[0] - s for s, m in hovers]
        before = [s for (s, _), d in zip(during, during_s) if s + d < view_done]
        idle = []
        for _ in range(3):
            sent, match = keystroke(version)
            idle.append(server.wait(match)[0] - sent)
            version += 1
        server.close()
        return {"initialize": server.initialized, "first diagnostic": first,
                "first diagnostic, server CPU time": server.cpu, "keystroke, idle": idle,
                "code lenses resolved": lens_done - lens_sent,
                "viewOutput": view_done - view_sent, "keystroke during viewOutput": during_s,
                "answered before viewOutput": f"{len(before)}/{len(during_s)}", "hover during viewOutput": hover_s}
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def summary(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh servers to measure (default 5)")
    ap.add_argument("--worker", choices=["process", "thread"], help="where heavy requests run (the server's "
                    "initializationOptions.worker; the default is the server's)")
    ap.add_argument("--json", type=Path, help="also write every run's figures here")
    args = ap.parse_args(argv)
    options = {"worker": args.worker} if args.worker else {}
    runs = [one_run(options) for _ in range(args.runs)]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set: modules without a cached .pyc compile at every start\n")
    print(f"rpn2c lsp, {args.runs} fresh servers, {os.cpu_count()} CPUs visible, "
          f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'} usable, "
          f"load average {os.getloadavg()[0]:.1f}, worker {args.worker or 'default'}\n")
    print("| measure | median (min–max) |\n|---|---:|")
    for key in ("initialize", "first diagnostic", "first diagnostic, server CPU time", "keystroke, idle",
                "code lenses resolved", "viewOutput", "keystroke during viewOutput", "hover during viewOutput"):
        values = [v for r in runs for v in (r[key] if isinstance(r[key], list) else [r[key]]) if v is not None]
        print(f"| {key} | {summary(values)} |")
    print(f"| keystroke diagnostics published before the viewOutput answer | "
          f"{', '.join(r['answered before viewOutput'] for r in runs)} |")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
