"""``rpn2c lsp``: a language server for `.rpn` files, speaking the LSP over stdin/stdout.

Diagnostics come from the real checker (all errors, their codes, did-you-mean hints as quick fixes), checked again
once typing pauses (``DEBOUNCE``; ``initializationOptions.debounce_ms`` overrides) and at once on open and save; the
requests (hover, completion, definition, formatting, outline, references, signature help, inlay hints, code lenses,
``rpn2c.viewOutput``) are :mod:`rpn2c.runtime.lsp_features`, and rename, semantic tokens, folding ranges and workspace
symbols :mod:`rpn2c.runtime.lsp_structure`. The heavy ones (``viewOutput`` imports torch and builds
the model; code lens resolution runs the optimiser) go to a worker process (:mod:`rpn2c.runtime.lsp_worker`), so
diagnostics and the light requests never wait behind them. The wire is :mod:`rpn2c.runtime.lsp_wire`: plain JSON-RPC
with no protocol library, so the first diagnostics arrive as soon as the checker has loaded.
"""

from __future__ import annotations

import queue
import re
import sys
import threading
import time
from pathlib import Path

from rpn2c.errors import Span
from rpn2c.runtime.common import EXIT_OK
from rpn2c.runtime.lsp_wire import (CONTENT_MODIFIED, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, NAME,
                                    SEMANTIC_LEGEND, SERVER_NOT_INITIALIZED, Document, ResponseError, read_message,
                                    uri_path, write_message)
from rpn2c.runtime.lsp_worker import HEAVY, KINDS, VIEW_OUTPUT, Done, Job, Jobs, target_uri

CAPABILITIES = {
    "positionEncoding": "utf-16",
    "textDocumentSync": {"openClose": True, "change": 2, "save": {"includeText": False}},  # 2: incremental
    "hoverProvider": True,
    "completionProvider": {"triggerCharacters": ["=", "(", ",", "[", "."], "resolveProvider": True},
    "definitionProvider": True,
    "documentFormattingProvider": True,
    "codeActionProvider": {"codeActionKinds": ["quickfix"]},
    "documentSymbolProvider": True,
    "referencesProvider": True,
    "signatureHelpProvider": {"triggerCharacters": ["(", ","], "retriggerCharacters": ["="]},
    "inlayHintProvider": {"resolveProvider": False},
    "codeLensProvider": {"resolveProvider": True},
    "executeCommandProvider": {"commands": [VIEW_OUTPUT]},
    "renameProvider": {"prepareProvider": True},
    "semanticTokensProvider": {"legend": SEMANTIC_LEGEND, "full": True},
    "foldingRangeProvider": True,
    "workspaceSymbolProvider": True,
}
DEBOUNCE = 0.15  # seconds without a change before a changed document is checked
ERROR, LOG_ERROR = 1, 1  # DiagnosticSeverity.Error, MessageType.Error
_SUGGESTED = re.compile(r"did you mean '([A-Za-z_][A-Za-z0-9_.]*)'\?")


def cmd_lsp(args) -> int:
    return Server(sys.stdin.buffer, sys.stdout.buffer).serve()


def span_range(doc: Document, span: Span) -> dict:
    """The client range of a 1-based checker span (at least one character wide)."""
    line, col = max(span.line - 1, 0), max(span.col - 1, 0)
    end_line, end_col = max(span.end_line - 1, line), max(span.end_col - 1, 0)
    if (end_line, end_col) <= (line, col):
        end_line, end_col = line, col + 1
    return doc.client_range(line, col, end_line, end_col)


class Server:
    """One client on ``rx``/``tx``: the LSP lifecycle, open documents, cached analyses and debounced checks."""

    def __init__(self, rx, tx, debounce: float = DEBOUNCE):
        self.rx, self.tx, self.debounce = rx, tx, debounce
        self.docs: dict[str, Document] = {}
        self.cache: dict[str, object] = {}  # uri -> the analysis of its latest checked text
        self.due: dict[str, float] = {}  # uri -> when its debounced check runs
        self.checks = 0
        self.preloaded = False  # the modules later requests need, imported once the first diagnostics are out
        self.roots: list[Path] = []  # the workspace's folders
        self._workspace = None
        self.state = "new"  # new -> running -> shut down
        self.inbox: queue.Queue = queue.Queue()
        self.jobs = Jobs(self._send, self.inbox.put, make_state=worker_state)  # heavy requests, by a worker
        self.requests = {"initialize": self.initialize, "shutdown": self.shutdown}
        self.features: dict | None = None  # the other requests' handlers, loaded after ``initialize`` is answered
        self.notifications = {"initialized": None, "exit": None, "textDocument/didOpen": self.did_open,
                              "textDocument/didChange": self.did_change, "textDocument/didSave": self.did_save,
                              "textDocument/didClose": self.did_close, "$/cancelRequest": self.cancel,
                              "workspace/didChangeConfiguration": None}

    # -------------------------------------------------------------------------------------------- loop
    def serve(self) -> int:
        """Answer messages until ``exit`` (0 after ``shutdown``, else 1) or the end of input."""
        threading.Thread(target=self._read, daemon=True).start()
        while True:
            wait = min(self.due.values(), default=None)
            try:
                item = self.inbox.get(timeout=None if wait is None else max(wait - time.monotonic(), 0))
            except queue.Empty:
                self._publish_due()
                continue
            if item is None or (isinstance(item, dict) and item.get("method") == "exit"):
                self.jobs.close()
                return EXIT_OK if item is None or self.state == "shut down" else 1
            if isinstance(item, Done):
                self.jobs.finished(item)
            elif isinstance(item, ResponseError):
                self._send({"id": None, "error": {"code": item.code, "message": str(item)}})
            else:
                self._dispatch(item)

    def _read(self) -> None:
        """Queue each message; stop after ``exit`` or at the end of input, so that no read of stdin is in flight
        when the interpreter shuts down (a daemon thread inside a buffered read aborts its finalisation)."""
        while True:
            try:
                message = read_message(self.rx)
            except ResponseError as exc:
                self.inbox.put(exc)
                continue
            self.inbox.put(message)
            if message is None or message.get("method") == "exit":
                return

    def _dispatch(self, message: dict) -> None:
        method, params, ident = message.get("method"), message.get("params") or {}, message.get("id")
        if method is None:
            return  # a response to a request of ours: none are sent
        if ident is None:
            handler = self.notifications.get(method)
            if handler is not None and self.state == "running":
                self._guarded(handler, params)
            return
        try:
            if method != "initialize" and self.state == "new":
                raise ResponseError(SERVER_NOT_INITIALIZED, f"'{method}' before 'initialize'")
            if self.state == "shut down":
                raise ResponseError(INVALID_REQUEST, f"'{method}' after 'shutdown'")
            if method in HEAVY:  # off this loop: the next keystroke's diagnostics never wait for it
                self._submit(ident, method, params)
                return
            handler = self.requests.get(method) or self.feature(method)
            if handler is None:
                raise ResponseError(METHOD_NOT_FOUND, f"method not found: {method}")
            self._send({"id": ident, "result": handler(params)})
        except ResponseError as exc:
            self._send({"id": ident, "error": {"code": exc.code, "message": str(exc)}})
        except Exception as exc:  # a bug in a feature answers its request, the server stays up
            self._send({"id": ident, "error": {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}: {exc}"}})

    def _submit(self, ident, method: str, params: dict) -> None:
        """Queue a heavy request for the worker, with its document as it is now."""
        uri = target_uri(method, params)
        doc = self.docs.get(uri)
        if method == "codeLens/resolve" and doc is not None and params["data"].get("version") != doc.version:
            raise ResponseError(CONTENT_MODIFIED, "the document changed since this code lens was made")
        snapshot = Document(uri, doc.text, doc.version) if doc is not None else None
        self.jobs.submit(Job(ident, method, params, uri, snapshot))

    def feature(self, method: str):
        """The handler of request ``method`` among the features (:mod:`rpn2c.runtime.lsp_features`), or None."""
        if self.features is None:
            from rpn2c.runtime import lsp_features, lsp_structure

            self.features = {**lsp_features.requests(self), **lsp_structure.requests(self)}
        return self.features.get(method)

    @property
    def workspace(self):
        """The workspace's spec files (:class:`rpn2c.runtime.workspace.Workspace`), open documents' texts first."""
        if self._workspace is None:
            from rpn2c.runtime.workspace import Workspace

            self._workspace = Workspace(self.roots, self._open_texts)
        return self._workspace

    def _open_texts(self) -> dict[Path, str]:
        out = {}
        for uri, doc in list(self.docs.items()):  # one copy: the preloading thread reads it too
            path = uri_path(uri)
            if path is not None:
                out[path.resolve()] = doc.text
        return out

    def _preload(self) -> None:
        """Import what the requests after the first diagnostics need (the optimiser behind a value's hover, the
        request handlers) and index the workspace's spec files, on a thread: a few tenths of a second the first
        hover or workspace symbol search would otherwise spend in the loop."""
        import rpn2c.passes  # noqa: F401
        import rpn2c.runtime.lsp_features  # noqa: F401
        import rpn2c.runtime.lsp_structure  # noqa: F401

        try:
            self.workspace.index()
        except (OSError, RuntimeError):  # a folder that vanished, or documents changing meanwhile: the search reads
            pass

    def _guarded(self, handler, params) -> None:
        try:
            handler(params)
        except Exception as exc:  # a notification has no answer: tell the user in the editor's log
            self.notify("window/logMessage", {"type": LOG_ERROR, "message": f"rpn2c: {type(exc).__name__}: {exc}"})

    def _send(self, message: dict) -> None:
        write_message(self.tx, message)

    def notify(self, method: str, params: dict) -> None:
        self._send({"method": method, "params": params})

    # -------------------------------------------------------------------------------------------- lifecycle
    def initialize(self, params: dict) -> dict:
        from rpn2c import __version__

        options = params.get("initializationOptions")
        debounce = options.get("debounce_ms") if isinstance(options, dict) else None
        if isinstance(debounce, (int, float)) and not isinstance(debounce, bool) and 0 <= debounce <= 10_000:
            self.debounce = debounce / 1000
        worker = options.get("worker") if isinstance(options, dict) else None
        if worker in KINDS:
            self.jobs.kind = worker
        folders = params.get("workspaceFolders") or [{"uri": params.get("rootUri") or ""}]
        self.roots = [p for f in folders if isinstance(f, dict) and (p := uri_path(str(f.get("uri")))) is not None]
        if not self.roots and isinstance(params.get("rootPath"), str):
            self.roots = [Path(params["rootPath"])]
        self.state = "running"
        return {"capabilities": CAPABILITIES, "serverInfo": {"name": NAME, "version": __version__}}

    def shutdown(self, params) -> None:
        self.state = "shut down"
        self.jobs.close("the server is shutting down")
        return None

    def cancel(self, params: dict) -> None:
        """``$/cancelRequest``: a heavy request still unanswered is answered RequestCancelled (the light ones are
        answered in order, before a later cancel is read)."""
        self.jobs.cancel(params.get("id"))

    # -------------------------------------------------------------------------------------------- documents
    def document(self, uri: str) -> Document:
        """An open document, or the file the URI names read from disk."""
        doc = self.docs.get(uri)
        if doc is not None:
            return doc
        path = uri_path(uri)
        try:
            text = path.read_text(encoding="utf-8") if path is not None else ""
        except OSError:
            text = ""
        return Document(uri, text)

    def analysis_of(self, uri: str):
        """The analysis of the document's current text: cached while the text is unchanged."""
        from rpn2c.runtime.analysis import analyse

        doc, path = self.document(uri), uri_path(uri)
        a = self.cache.get(uri)
        if a is None or a.text != doc.text:
            self.checks += 1
            a = self.cache[uri] = analyse(doc.text, str(path) if path else uri, path=path)
        return a

    def publish(self, uri: str) -> None:
        self.due.pop(uri, None)
        doc = self.document(uri)
        a = self.analysis_of(uri)
        params = {"uri": uri, "diagnostics": [self._diagnostic(doc, a.file, d) for d in a.diagnostics]}
        if doc.version is not None:
            params["version"] = doc.version
        self.notify("textDocument/publishDiagnostics", params)
        if not self.preloaded:
            self.preloaded = True
            threading.Thread(target=self._preload, daemon=True).start()

    def _publish_due(self) -> None:
        now = time.monotonic()
        for uri in [u for u, t in self.due.items() if t <= now]:
            self._guarded(self.publish, uri)

    def _diagnostic(self, doc: Document, file: str, d) -> dict:
        message, related = d.message, []
        if d.span.file == file:
            rng = span_range(doc, d.span)
        else:  # an error inside an imported file: shown on the import that brings it in
            rng = span_range(doc, _import_span(doc.text, d.span.file))
            message = f"{d.span}: {d.message}"
        for span, note in d.notes:
            if span.file == file:
                related.append({"location": {"uri": doc.uri, "range": span_range(doc, span)}, "message": note})
        if d.suggestion:
            message += f"\nhelp: {d.suggestion}"
        out = {"range": rng, "message": message, "severity": ERROR, "source": NAME}
        if d.code:
            out["code"] = d.code
        if related:
            out["relatedInformation"] = related
        match = _SUGGESTED.search(d.suggestion or "")
        if match and d.span.file == file:
            out["data"] = {"replace": match[1]}
        return out

    def did_open(self, params: dict) -> None:
        item = params["textDocument"]
        self.docs[item["uri"]] = Document(item["uri"], item.get("text", ""), item.get("version"))
        self.publish(item["uri"])

    def did_change(self, params: dict) -> None:
        """Apply the changes; check once typing pauses (each change restarts the wait; the latest text wins)."""
        ident = params["textDocument"]
        doc = self.docs.get(ident["uri"])
        if doc is None:
            return
        for change in params.get("contentChanges", []):
            doc.apply(change)
        doc.version = ident.get("version", doc.version)
        self.due[doc.uri] = time.monotonic() + self.debounce
        self.jobs.supersede(doc.uri)

    def did_save(self, params: dict) -> None:
        uri = params["textDocument"]["uri"]
        self.cache.pop(uri, None)  # an imported file may have changed on disk
        if uri in self.docs:
            self.publish(uri)

    def did_close(self, params: dict) -> None:
        uri = params["textDocument"]["uri"]
        self.docs.pop(uri, None)
        self.cache.pop(uri, None)
        self.due.pop(uri, None)
        self.jobs.supersede(uri)
        self.notify("textDocument/publishDiagnostics", {"uri": uri, "diagnostics": []})


def _import_span(text: str, file: str) -> Span:
    """The span of the ``import`` that brings in ``file`` (matched by file name), else of the first import."""
    from rpn2c.runtime.editor import outline

    imports = outline(text).imports
    target = Path(file).name
    tok = next((t for p, t in imports.values() if Path(p).name == target), None)
    if tok is None and imports:
        tok = next(iter(imports.values()))[1]
    if tok is None:
        return Span(file, 1, 1, 1, 2)
    return Span(file, tok.line, tok.column, tok.end_line, tok.end_column)


def worker_state() -> Server:
    """A worker's own server: its documents and analyses, no wire (:mod:`rpn2c.runtime.lsp_child`, or a thread)."""
    state = Server(None, None)
    state.state = "running"
    return state
