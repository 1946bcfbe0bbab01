"""``rpn2c lsp``: a language server for `.rpn` files on pygls (the ``lsp`` extra), speaking over stdin/stdout.

Diagnostics come from the real checker on every change (all errors, their codes, did-you-mean hints as quick
fixes), hover and completion from the component registry, formatting from ``rpn2c fmt``; the analysis itself is
:mod:`rpn2c.runtime.editor`.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from rpn2c.errors import Span, SpecError
from rpn2c.runtime.common import EXIT_OK, _Usage

NAME = "rpn2c"
DEBOUNCE = 0.15  # seconds without a change before a changed document is checked (``debounce_ms`` overrides)
INSTALL_HINT = "`rpn2c lsp` needs the language-server packages: pip install \"rpn2c[lsp]\""
_SUGGESTED = re.compile(r"did you mean '([A-Za-z_][A-Za-z0-9_.]*)'\?")


def register(sub) -> None:
    """Add the ``lsp`` sub-command."""
    s = sub.add_parser("lsp", help="run the language server for editors (stdin/stdout)",
                       description="run the language server for .rpn files on stdin/stdout")
    s.add_argument("--stdio", action="store_true", help="accepted for editors that pass it; stdio is the default")
    s.set_defaults(fn=cmd_lsp)


def cmd_lsp(args) -> int:
    create_server().start_io()
    return EXIT_OK


def create_server():
    """A pygls ``LanguageServer`` with every feature registered; a usage error names the extra when pygls is
    missing."""
    try:
        from lsprotocol import types as lsp
        from pygls.lsp.server import LanguageServer
        from pygls.workspace.position_codec import ServerTextPosition, ServerTextRange
    except ImportError:
        raise _Usage(INSTALL_HINT) from None
    from rpn2c import __version__
    from rpn2c.runtime import editor, lsp_features

    server = LanguageServer(NAME, __version__)
    server.debounce = DEBOUNCE

    def document(uri: str):
        doc = server.workspace.get_text_document(uri)
        path = Path(doc.path) if doc.path else None
        return doc, doc.source, path

    def span_range(span) -> lsp.Range:
        line, col = max(span.line - 1, 0), max(span.col - 1, 0)
        end_line, end_col = max(span.end_line - 1, line), max(span.end_col - 1, 0)
        if (end_line, end_col) <= (line, col):
            end_line, end_col = line, col + 1
        return lsp.Range(lsp.Position(line, col), lsp.Position(end_line, end_col))

    def client_range(doc, rng: lsp.Range) -> lsp.Range:
        server_range = ServerTextRange(ServerTextPosition(rng.start.line, rng.start.character),
                                       ServerTextPosition(rng.end.line, rng.end.character))
        return doc.range_to_client_units(server_range)

    def to_lsp(doc, text: str, file: str, d) -> lsp.Diagnostic:
        message, related = d.message, []
        if d.span.file == file:
            rng = client_range(doc, span_range(d.span))
        else:  # an error inside an imported file: shown on the import that brings it in
            rng = client_range(doc, _import_range(text, d.span.file, span_range))
            message = f"{d.span}: {d.message}"
        for span, note in d.notes:
            if span.file == file:
                related.append(lsp.DiagnosticRelatedInformation(
                    lsp.Location(doc.uri, client_range(doc, span_range(span))), note))
        if d.suggestion:
            message += f"\nhelp: {d.suggestion}"
        match = _SUGGESTED.search(d.suggestion or "")
        data = {"replace": match[1]} if match and d.span.file == file else None
        return lsp.Diagnostic(rng, message, severity=lsp.DiagnosticSeverity.Error, code=d.code, source=NAME,
                              related_information=related or None, data=data)

    cache: dict[str, object] = {}  # uri -> the analysis of its latest checked text
    timers: dict[str, asyncio.TimerHandle] = {}
    server.checks = 0  # how many times a text was checked (the debounce keeps it below the changes)

    def analysis_of(uri: str):
        """The analysis of the document's current text: cached while the text is unchanged."""
        from rpn2c.runtime.analysis import analyse

        doc, text, path = document(uri)
        a = cache.get(uri)
        if a is None or a.text != text:
            server.checks += 1
            a = cache[uri] = analyse(text, str(path) if path else uri, path=path)
        return a

    def publish(uri: str, version: int | None = None) -> None:
        timers.pop(uri, None)
        doc, text, path = document(uri)
        a = analysis_of(uri)  # imports confined as `rpn2c check` does
        items = [to_lsp(doc, text, a.file, d) for d in a.diagnostics]
        server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri, items, version))

    def publish_later(uri: str, version: int | None) -> None:
        """Check once typing pauses: each change restarts the wait; the latest text wins."""
        if uri in timers:
            timers.pop(uri).cancel()
        timers[uri] = asyncio.get_running_loop().call_later(server.debounce, lambda: publish(uri, version))

    @server.feature(lsp.INITIALIZE)
    def initialize(ls, params: lsp.InitializeParams):
        options = params.initialization_options if isinstance(params.initialization_options, dict) else {}
        debounce = options.get("debounce_ms")
        if isinstance(debounce, (int, float)) and not isinstance(debounce, bool) and 0 <= debounce <= 10_000:
            server.debounce = debounce / 1000

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: lsp.DidOpenTextDocumentParams):
        publish(params.text_document.uri, params.text_document.version)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls, params: lsp.DidChangeTextDocumentParams):
        publish_later(params.text_document.uri, params.text_document.version)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls, params: lsp.DidSaveTextDocumentParams):
        cache.pop(params.text_document.uri, None)  # an imported file may have changed on disk
        publish(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params: lsp.DidCloseTextDocumentParams):
        cache.pop(params.text_document.uri, None)
        if params.text_document.uri in timers:
            timers.pop(params.text_document.uri).cancel()
        server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(params.text_document.uri, []))

    def position(doc, pos: lsp.Position) -> tuple[int, int]:
        p = doc.position_from_client_units(pos)
        return p.line, p.character

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls, params: lsp.HoverParams):
        doc, text, path = document(params.text_document.uri)
        line, col = position(doc, params.position)
        h = lsp_features.value_hover(analysis_of(params.text_document.uri), text, line, col) or editor.hover(
            text, line, col, path=path)
        if h is None:
            return None
        rng = lsp.Range(lsp.Position(h.line, h.col), lsp.Position(h.line, h.end_col))
        return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, h.markdown), client_range(doc, rng))

    kinds = {"component": lsp.CompletionItemKind.Function, "hyper-parameter": lsp.CompletionItemKind.Property,
             "setting": lsp.CompletionItemKind.Field, "keyword": lsp.CompletionItemKind.Keyword,
             "block": lsp.CompletionItemKind.Class, "module": lsp.CompletionItemKind.Module,
             "parameter": lsp.CompletionItemKind.Variable}

    @server.feature(lsp.TEXT_DOCUMENT_COMPLETION,
                    lsp.CompletionOptions(trigger_characters=["=", "(", ",", "[", "."], resolve_provider=True))
    def completion(ls, params: lsp.CompletionParams):
        doc, text, path = document(params.text_document.uri)
        items = editor.complete(text, *position(doc, params.position), path=path)
        return lsp.CompletionList(is_incomplete=False, items=[
            lsp.CompletionItem(c.label, kind=kinds[c.kind], detail=c.detail or None,
                               documentation=lsp.MarkupContent(lsp.MarkupKind.Markdown, c.documentation)
                               if c.documentation else None,
                               data={"family": c.family} if c.family else None)
            for c in items])

    @server.feature(lsp.COMPLETION_ITEM_RESOLVE)
    def completion_resolve(ls, item: lsp.CompletionItem):
        """A component's full documentation, fetched only for the item the user looks at."""
        family = item.data.get("family") if isinstance(item.data, dict) else None
        entry = editor.component(item.label, (family,)) if family in editor.FAMILIES else None
        if entry is not None:
            item.documentation = lsp.MarkupContent(lsp.MarkupKind.Markdown, editor.component_markdown(entry))
        return item

    @server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
    def definition(ls, params: lsp.DefinitionParams):
        doc, text, path = document(params.text_document.uri)
        out = []
        for loc in editor.definition(text, *position(doc, params.position), path=path):
            rng = lsp.Range(lsp.Position(loc.line, loc.col), lsp.Position(loc.line, loc.end_col))
            if loc.path is None or (path is not None and loc.path == path.resolve()):
                out.append(lsp.Location(doc.uri, client_range(doc, rng)))
            else:
                out.append(lsp.Location(loc.path.as_uri(), rng))
        return out or None

    @server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls, params: lsp.DocumentFormattingParams):
        doc, text, path = document(params.text_document.uri)
        try:
            formatted = editor.format_text(text, str(path) if path else params.text_document.uri)
        except SpecError:
            return None  # the diagnostics already show the parse error
        if formatted == text:
            return []
        end = doc.client_position_at_offset(len(text)) if text else lsp.Position(0, 0)
        return [lsp.TextEdit(lsp.Range(lsp.Position(0, 0), end), formatted)]

    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION,
                    lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix]))
    def code_action(ls, params: lsp.CodeActionParams):
        doc = server.workspace.get_text_document(params.text_document.uri)
        actions = []
        for diag in params.context.diagnostics:
            replace = (diag.data or {}).get("replace") if isinstance(diag.data, dict) else None
            if diag.source != NAME or not replace:
                continue
            current = doc.text_in_client_range(diag.range)
            name = re.match(r"[A-Za-z_][A-Za-z0-9_.]*", current)
            if name is None:
                continue
            start = diag.range.start
            rng = lsp.Range(start, lsp.Position(start.line, start.character + len(name[0])))
            edit = lsp.WorkspaceEdit(changes={doc.uri: [lsp.TextEdit(rng, replace)]})
            actions.append(lsp.CodeAction(f"Change '{name[0]}' to '{replace}'", kind=lsp.CodeActionKind.QuickFix,
                                          diagnostics=[diag], edit=edit, is_preferred=True))
        return actions or None

    lsp_features.register(server, lsp, document, client_range, analysis_of)
    return server


def _import_range(text: str, file: str, span_range):
    """The range of the ``import`` that brings in ``file`` (matched by file name), else of the first import."""
    from rpn2c.runtime.editor import outline

    imports = outline(text).imports
    target = Path(file).name
    tok = next((t for p, t in imports.values() if Path(p).name == target), None)
    if tok is None and imports:
        tok = next(iter(imports.values()))[1]
    if tok is None:
        return span_range(Span(file, 1, 1, 1, 2))
    return span_range(Span(file, tok.line, tok.column, tok.end_line, tok.end_column))
