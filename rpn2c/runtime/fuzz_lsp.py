"""Fuzzing the language server: random edits of the shipped specs, then every request the server says it serves.

An input (one seed) is a shipped spec (``specs/``, ``examples/specs/``), one to six edits sent as
``textDocument/didChange`` (a range replaced by a token of the spec, a registry name, a bracket, a number, a line
of the spec, non-ASCII text, or nothing; now and then the whole text) and random positions. The server
(:class:`rpn2c.runtime.lsp.Server`, in a thread of this process, speaking the LSP over pipes) is started fresh,
initialised with no debounce; after the edits, each request its capabilities advertise is sent (:data:`REQUESTS`
maps a capability to its requests; one a server advertises beyond them is counted as not driven), a code lens's
command is executed, a completion item resolved.

A failure is an internal error answered to a request (or any error but a cancellation; a refused rename is an
answer), an error the server logs while handling a notification, no answer within the time limit, or a server that
stops. :data:`COUNTS` counts the requests sent by method.
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import threading
import time
from collections import Counter
from pathlib import Path

from rpn2c.runtime.fuzz import Outcome
from rpn2c.runtime.fuzz_inputs import ROOT, TOKEN
from rpn2c.runtime.lsp_wire import INTERNAL_ERROR, Document, read_message, write_message

COUNTS: Counter = Counter()  # requests sent, by method (read by the lanes)
NOT_DRIVEN: Counter = Counter()  # capabilities advertised that no request here exercises
_CANCELLED = (-32800, -32801, -32802)  # RequestCancelled, ContentModified, ServerCancelled
_REFUSED = {"textDocument/rename": (-32602, -32803), "textDocument/prepareRename": (-32602, -32803)}
_QUIET = {"positionEncoding", "textDocumentSync", "executeCommandProvider", "workspace", "experimental"}
_SNIPPETS = ["(", ")", "{", "}", "[", "]", "=", ",", ".", "\n", "  ", "0", "1", "-1", "2.5", "1e308", "100000", "é",
             "😀", "→", "\t", '"', "#", "//", "head", "layer", "model", "input", "return", "x", "out = 4", "none"]


def shipped_specs() -> list[Path]:
    return sorted(p for folder in ("specs", "examples/specs") for p in (ROOT / folder).rglob("*.rpn"))


# ------------------------------------------------------------------------------------------------ inputs
def lsp_input(seed: int) -> dict:
    """Input ``seed``: the spec, its edits (LSP content changes, in order) and the positions requests use."""
    from rpn2c.components.registry import REGISTRY

    rng = random.Random(seed)
    path = rng.choice(shipped_specs())
    text = path.read_text(encoding="utf-8")
    doc = Document(path.as_uri(), text)
    names = sorted({n for entries in REGISTRY.values() for n in entries})
    changes = []
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.1:
            new = _edited(rng, doc.text, names)
            changes.append({"text": new})
            doc.text = new
            continue
        start = rng.randrange(len(doc.text) + 1)
        end = min(len(doc.text), start + rng.choice([0, 0, 1, 2, 5, 30]))
        piece = _piece(rng, doc.text, names)
        rng_lsp = {"start": _client(doc, start), "end": _client(doc, end)}
        changes.append({"range": rng_lsp, "text": piece})
        doc.apply(changes[-1])
    positions = [_client(doc, rng.randrange(len(doc.text) + 1)) for _ in range(4)]
    return {"seed": seed, "spec": str(path.relative_to(ROOT)), "changes": changes, "positions": positions,
            "name": rng.choice(["y2", "renamed", "x", "head", "not a name", "é", "model"])}


def _client(doc: Document, offset: int) -> dict:
    before = doc.text[:offset]
    line = before.count("\n")
    return doc.client_position(line, offset - (before.rfind("\n") + 1))


def _piece(rng: random.Random, text: str, names: list[str]) -> str:
    r = rng.random()
    if r < 0.35:
        toks = [m.group() for m in TOKEN.finditer(text)] or ["x"]
        return rng.choice(toks)
    if r < 0.5:
        return rng.choice(names)
    if r < 0.6:
        lines = text.split("\n")
        return rng.choice(lines) + "\n"
    if r < 0.7:
        return ""
    return rng.choice(_SNIPPETS)


def _edited(rng: random.Random, text: str, names: list[str]) -> str:
    """The whole text with one line deleted, duplicated or replaced by a piece."""
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    op = rng.choice(["del", "dup", "piece"])
    if op == "del":
        del lines[i]
    elif op == "dup":
        lines.insert(i, lines[i])
    else:
        lines[i] = _piece(rng, text, names)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ the client
class _Client:
    """A server in a thread of this process, on two pipes; messages from it are read into a queue."""

    def __init__(self):
        from rpn2c.runtime.lsp import Server

        to_server, self._send = os.pipe()
        self._recv, from_server = os.pipe()
        self.rx = os.fdopen(to_server, "rb")
        self.tx = os.fdopen(from_server, "wb")
        self.out = os.fdopen(self._send, "wb")
        self.inp = os.fdopen(self._recv, "rb")
        self.server = Server(self.rx, self.tx)
        self.messages: queue.Queue = queue.Queue()
        self.notes: list[dict] = []
        self.answers: dict[int, dict] = {}
        self.ids = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        self.reader.start()

    def _serve(self) -> None:
        try:
            self.server.serve()
        finally:
            self.tx.close()

    def _read(self) -> None:
        while True:
            try:
                m = read_message(self.inp)
            except Exception:  # noqa: BLE001 - a malformed frame from the server is reported as no answer
                m = None
            self.messages.put(m)
            if m is None:
                return

    def notify(self, method: str, params: dict) -> None:
        write_message(self.out, {"method": method, "params": params})

    def request(self, method: str, params, deadline: float) -> dict | None:
        """The answer to ``method`` (``result`` or ``error``), or None when none came before ``deadline``."""
        self.ids += 1
        ident = self.ids
        COUNTS[method] += 1
        write_message(self.out, {"id": ident, "method": method, "params": params})
        while ident not in self.answers:
            try:
                m = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                return None
            if m is None:
                return {"error": {"code": "stopped", "message": "the server stopped"}}
            if "id" in m and "method" not in m:
                self.answers[m["id"]] = m
            else:
                self.notes.append(m)
        return self.answers.pop(ident)

    def close(self) -> None:
        try:
            self.request("shutdown", None, time.monotonic() + 5)
            self.notify("exit", {})
        except (OSError, ValueError):
            pass
        self.thread.join(5)
        for f in (self.out, self.inp, self.rx):
            try:
                f.close()
            except OSError:
                pass


# ------------------------------------------------------------------------------------------------ requests
def _doc(uri):
    return {"textDocument": {"uri": uri}}


def _at(uri, pos):
    return {**_doc(uri), "position": pos}


def _whole(text: str) -> dict:
    lines = text.split("\n")
    return {"start": {"line": 0, "character": 0}, "end": {"line": len(lines) - 1, "character": len(lines[-1]) + 1}}


#: capability -> requests it makes: (method, params from (uri, text, positions, input, previous answers))
REQUESTS = {
    "hoverProvider": [("textDocument/hover", lambda u, t, p, i, a, q=q: _at(u, q)) for q in (0, 1)],
    "completionProvider": [("textDocument/completion", lambda u, t, p, i, a, q=q: _at(u, q)) for q in (1, 2)],
    "definitionProvider": [("textDocument/definition", lambda u, t, p, i, a: _at(u, 0))],
    "declarationProvider": [("textDocument/declaration", lambda u, t, p, i, a: _at(u, 0))],
    "typeDefinitionProvider": [("textDocument/typeDefinition", lambda u, t, p, i, a: _at(u, 0))],
    "implementationProvider": [("textDocument/implementation", lambda u, t, p, i, a: _at(u, 0))],
    "documentHighlightProvider": [("textDocument/documentHighlight", lambda u, t, p, i, a: _at(u, 3))],
    "referencesProvider": [("textDocument/references",
                            lambda u, t, p, i, a: {**_at(u, 3), "context": {"includeDeclaration": True}})],
    "signatureHelpProvider": [("textDocument/signatureHelp", lambda u, t, p, i, a: _at(u, 2))],
    "documentFormattingProvider": [("textDocument/formatting",
                                    lambda u, t, p, i, a: {**_doc(u), "options": {"tabSize": 2, "insertSpaces": True}})],
    "documentRangeFormattingProvider": [("textDocument/rangeFormatting", lambda u, t, p, i, a: {
        **_doc(u), "range": _whole(t), "options": {"tabSize": 2, "insertSpaces": True}})],
    "documentSymbolProvider": [("textDocument/documentSymbol", lambda u, t, p, i, a: _doc(u))],
    "foldingRangeProvider": [("textDocument/foldingRange", lambda u, t, p, i, a: _doc(u))],
    "selectionRangeProvider": [("textDocument/selectionRange", lambda u, t, p, i, a: {**_doc(u),
                                                                                       "positions": i["positions"]})],
    "documentLinkProvider": [("textDocument/documentLink", lambda u, t, p, i, a: _doc(u))],
    "inlayHintProvider": [("textDocument/inlayHint", lambda u, t, p, i, a: {**_doc(u), "range": _whole(t)})],
    "codeActionProvider": [("textDocument/codeAction", lambda u, t, p, i, a: {
        **_doc(u), "range": _whole(t), "context": {"diagnostics": a.get("diagnostics", [])}})],
    "renameProvider": [("textDocument/prepareRename", lambda u, t, p, i, a: _at(u, 0)),
                       ("textDocument/rename", lambda u, t, p, i, a: {**_at(u, 0), "newName": i["name"]})],
    "semanticTokensProvider": [("textDocument/semanticTokens/full", lambda u, t, p, i, a: _doc(u)),
                               ("textDocument/semanticTokens/range", lambda u, t, p, i, a: {**_doc(u),
                                                                                             "range": _whole(t)})],
    "workspaceSymbolProvider": [("workspace/symbol", lambda u, t, p, i, a: {"query": i["name"][:2]})],
    "codeLensProvider": [("textDocument/codeLens", lambda u, t, p, i, a: _doc(u))],
}


def _params(method, make, uri, text, inp, answers):
    params = make(uri, text, None, inp, answers)
    if "position" in params and isinstance(params["position"], int):
        params["position"] = inp["positions"][params["position"] % len(inp["positions"])]
    return params


def run_lsp(inp: dict, time_limit: float = 30.0, until: str | None = None) -> Outcome:
    """Drive a fresh server through input ``inp`` (see the module docstring); ``until``: stop after the first request
    of that method (the minimiser asks only for the request that failed)."""
    client = _Client()
    t0 = time.monotonic()
    failure: Outcome | None = None

    def ask(method, params) -> dict | None:
        nonlocal failure
        answer = client.request(method, params, time.monotonic() + time_limit)
        if answer is None:
            failure = failure or Outcome("failure", f"lsp {method}: no answer in {time_limit:g} s",
                                         json.dumps(params)[:2000])
            return None
        error = answer.get("error")
        if error is not None and error.get("code") not in _CANCELLED + _REFUSED.get(method, ()):
            what = "internal error" if error.get("code") == INTERNAL_ERROR else f"error {error.get('code')}"
            kind = re.match(r"[A-Za-z_]+(Error|Exception)?", str(error.get("message", ""))) if what == \
                "internal error" else None
            failure = failure or Outcome("failure", f"lsp {method}: {what}" + (f": {kind[0]}" if kind else ""),
                                         f"{error.get('message', '')}\nparams: {json.dumps(params)[:2000]}")
        return answer

    try:
        folder = (ROOT / inp["spec"]).parent  # the spec's folder as the workspace, as an editor opens it
        # heavy requests in the server's default worker (a child process that imports torch) one session in
        # three, in a thread of this process (where torch is imported already) otherwise
        options = {"debounce_ms": 0, **({"worker": "thread"} if inp.get("seed", 0) % 3 else {})}
        init = ask("initialize", {"processId": None, "rootUri": folder.as_uri(), "capabilities": {},
                                  "initializationOptions": options})
        if init is None or "result" not in init:
            return failure or Outcome("failure", "lsp initialize: no result")
        caps = init["result"].get("capabilities", {})
        client.notify("initialized", {})
        path = ROOT / inp["spec"]
        uri, doc = path.as_uri(), Document(path.as_uri(), path.read_text(encoding="utf-8"))
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "rpn", "version": 1,
                                                                "text": doc.text}})
        for version, change in enumerate(inp["changes"], start=2):
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                     "contentChanges": [change]})
            doc.apply(change)
        answers: dict = {"positions": inp["positions"], "seed": inp.get("seed", 0)}
        for cap, value in caps.items():
            if cap in _QUIET or not value:
                continue
            if cap not in REQUESTS:
                NOT_DRIVEN[cap] += 1
                continue
            for method, make in REQUESTS[cap]:
                if method == "textDocument/prepareRename" and not (isinstance(value, dict) and value.get("prepareProvider")):
                    continue
                if method.endswith("semanticTokens/range") and not (isinstance(value, dict) and value.get("range")):
                    continue
                answer = ask(method, _params(method, make, uri, doc.text, inp, answers))
                answers[method] = (answer or {}).get("result")
                answers["diagnostics"] = _diagnostics(client.notes, uri)
                if failure is not None or method == until or time.monotonic() - t0 > 4 * time_limit:
                    break
            if failure is not None or until in answers:
                break
        if failure is None and until not in answers:
            _follow_ups(caps, answers, ask)
        logged = [n for n in client.notes if n.get("method") in ("window/logMessage", "window/showMessage")
                  and n.get("params", {}).get("type") == 1]
        if failure is None and logged:
            message = str(logged[0]["params"].get("message", ""))
            kind = re.match(r"rpn2c: ([A-Za-z_]+)", message)
            failure = Outcome("failure", f"lsp notification: logged error{': ' + kind[1] if kind else ''}", message)
        if failure is None and not client.thread.is_alive():
            failure = Outcome("failure", "lsp: the server stopped")
        return failure or Outcome("ok")
    finally:
        client.close()


def _diagnostics(notes: list[dict], uri: str) -> list:
    published = [n["params"] for n in notes if n.get("method") == "textDocument/publishDiagnostics"
                 and n.get("params", {}).get("uri") == uri]
    return published[-1].get("diagnostics", []) if published else []


def _follow_ups(caps: dict, answers: dict, ask) -> None:
    """Resolve the first completion item; resolve the first code lens where the server resolves lenses, and run
    its command (and the same command at a random position)."""
    completion = caps.get("completionProvider")
    items = answers.get("textDocument/completion")
    items = items.get("items", []) if isinstance(items, dict) else items or []
    if isinstance(completion, dict) and completion.get("resolveProvider") and items:
        ask("completionItem/resolve", items[0])
    commands = (caps.get("executeCommandProvider") or {}).get("commands", [])
    lenses = answers.get("textDocument/codeLens") or []
    resolves = (caps.get("codeLensProvider") or {}) if isinstance(caps.get("codeLensProvider"), dict) else {}
    for lens in lenses[:1]:
        if "command" not in lens and resolves.get("resolveProvider"):  # a lens whose command comes on request
            lens = (ask("codeLens/resolve", lens) or {}).get("result") or lens
        command = lens.get("command") or {}
        if command.get("command") not in commands:
            continue
        arguments = command.get("arguments", [])
        ask("workspace/executeCommand", {"command": command["command"], "arguments": arguments})
        if len(arguments) == 3 and isinstance(arguments[1], int) and answers["seed"] % 3 == 0:
            # [uri, line, character]: one session in three also runs it elsewhere (it compiles the model)
            pos = answers["positions"][-1]
            ask("workspace/executeCommand", {"command": command["command"],
                                             "arguments": [arguments[0], pos["line"], pos["character"]]})


# ------------------------------------------------------------------------------------------------ minimise
def minimise_lsp(inp: dict, kind: str, time_limit: float = 30.0, tries: int = 40) -> dict:
    """A smaller input failing with the same ``kind``: edits dropped, one at a time (the positions stay)."""
    changes, i = list(inp["changes"]), 0
    method = kind.split(":")[0].removeprefix("lsp ") if kind.startswith("lsp ") else None
    while i < len(changes) and tries > 0:
        trial = dict(inp, changes=changes[:i] + changes[i + 1:])
        tries -= 1
        if run_lsp(trial, time_limit, until=method).detail == kind:
            changes = trial["changes"]
        else:
            i += 1
    return dict(inp, changes=changes)
