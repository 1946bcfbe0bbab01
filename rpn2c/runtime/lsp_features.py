"""The language server's requests, answered as the LSP's JSON: hover (components, hyper-parameters, and values with
their type, shape, parameter count and kernels), completion per slot with resolve, definition, formatting, quick
fixes, outline, references, signature help, inlay hints with each value's inferred type and parameter count, code
lenses (resolved with the kernels each layer runs) and the ``rpn2c.viewOutput`` command (a layer's ``explain`` and
the generated program that runs it); the server sends the last two to its worker (:mod:`rpn2c.runtime.lsp_worker`).

Registered on :class:`rpn2c.runtime.lsp.Server` by :func:`requests`; the analysis is :mod:`rpn2c.runtime.editor`,
:mod:`rpn2c.runtime.symbols` (token stream and syntax tree) and :mod:`rpn2c.runtime.analysis` (checked graphs).
"""

from __future__ import annotations

import re

from rpn2c.errors import SpecError
from rpn2c.runtime import analysis, editor, symbols
from rpn2c.runtime.lsp_wire import NAME, Document, uri_path
from rpn2c.runtime.lsp_worker import VIEW_OUTPUT, target_uri

MARKDOWN = "markdown"
LENS_KERNELS = 3  # kernels named in a code lens's title

# the LSP's CompletionItemKind and SymbolKind numbers
_COMPLETION_KINDS = {"component": 3, "hyper-parameter": 10, "setting": 5, "keyword": 14, "block": 7, "module": 9,
                     "parameter": 6}
_SYMBOL_KINDS = {"model": 5, "block": 12, "parameter": 26, "input": 13, "head": 8, "compress": 8, "recurrent": 8,
                 "layer": 23, "op": 13, "alias": 13, "block use": 2, "repeat": 2}
_VARIABLE, _TYPE_HINT = 13, 1


def value_under(a: analysis.Analysis, text: str, line: int, col: int) -> analysis.Value | None:
    """The value written at ``(line, col)`` (its binding or a use of it), not a key, call or dotted name."""
    toks = editor.tokens(text)
    i = editor._at(toks, editor.offset_of(text, line, col))
    if i is None or toks[i].type != "NAME" or (i and toks[i - 1].type == "DOT"):
        return None
    nxt = toks[i + 1].type if i + 1 < len(toks) else None
    if nxt in ("LPAR", "DOT"):
        return None
    binding = editor._local_binding(toks, i)
    if binding is None:
        return None
    here = (toks[i].line - 1, toks[i].column - 1)
    if nxt == "EQUAL" and here != (binding.line, binding.col):
        return None  # a setting or hyper-parameter name
    return a.value_at(binding.line, binding.col)


def value_hover(a: analysis.Analysis, text: str, line: int, col: int) -> editor.Hover | None:
    """A value under the cursor: its type, shape, parameter count and kernels, then its definition's text."""
    v = value_under(a, text, line, col)
    if v is None or not v.instances:
        return None
    toks = editor.tokens(text)
    t = toks[editor._at(toks, editor.offset_of(text, line, col))]
    src = text.splitlines()[v.line].strip().rstrip("{").rstrip()
    return editor.Hover(analysis.value_markdown(a, v) + f"\n\n`{src}`", t.line - 1, t.column - 1, t.end_column - 1)


def _markup(text: str) -> dict:
    return {"kind": MARKDOWN, "value": text}


def _range(doc: Document, r: symbols.Range) -> dict:
    return doc.client_range(*r)


def requests(server) -> dict:
    """The request handlers of ``server`` (a :class:`rpn2c.runtime.lsp.Server`), by method."""

    def opened(params: dict):
        """The document, its text, its path and the 0-based position the request names."""
        uri = params["textDocument"]["uri"]
        doc = server.document(uri)
        pos = doc.position(params["position"]) if "position" in params else None
        return doc, uri_path(uri), pos

    def hover(params):
        doc, path, (line, col) = opened(params)
        h = value_hover(server.analysis_of(doc.uri), doc.text, line, col) or editor.hover(
            doc.text, line, col, path=path)
        if h is None:
            return None
        return {"contents": _markup(h.markdown), "range": doc.client_range(h.line, h.col, h.line, h.end_col)}

    def completion(params):
        doc, path, (line, col) = opened(params)
        items = []
        for c in editor.complete(doc.text, line, col, path=path):
            item = {"label": c.label, "kind": _COMPLETION_KINDS[c.kind]}
            if c.detail:
                item["detail"] = c.detail
            if c.documentation:
                item["documentation"] = _markup(c.documentation)
            if c.family:
                item["data"] = {"family": c.family}
            items.append(item)
        return {"isIncomplete": False, "items": items}

    def completion_resolve(item):
        """A component's full documentation, fetched only for the item the user looks at."""
        data = item.get("data")
        family = data.get("family") if isinstance(data, dict) else None
        entry = editor.component(item.get("label", ""), (family,)) if family in editor.FAMILIES else None
        if entry is not None:
            item = {**item, "documentation": _markup(editor.component_markdown(entry))}
        return item

    def definition(params):
        doc, path, (line, col) = opened(params)
        out = []
        for loc in editor.definition(doc.text, line, col, path=path):
            if loc.path is None or (path is not None and loc.path == path.resolve()):
                out.append({"uri": doc.uri, "range": doc.client_range(loc.line, loc.col, loc.line, loc.end_col)})
            else:
                target = server.document(loc.path.as_uri())
                out.append({"uri": target.uri, "range": target.client_range(loc.line, loc.col, loc.line,
                                                                             loc.end_col)})
        return out or None

    def formatting(params):
        doc, path, _ = opened(params)
        try:
            formatted = editor.format_text(doc.text, str(path) if path else doc.uri)
        except SpecError:
            return None  # the diagnostics already show the parse error
        if formatted == doc.text:
            return []
        return [{"range": {"start": {"line": 0, "character": 0}, "end": doc.end()}, "newText": formatted}]

    def code_action(params):
        doc, _, _ = opened(params)
        actions = []
        for diag in params.get("context", {}).get("diagnostics", []):
            data = diag.get("data")
            replace = data.get("replace") if isinstance(data, dict) else None
            if diag.get("source") != NAME or not replace:
                continue
            start, end = diag["range"]["start"], diag["range"]["end"]
            current = doc.text[doc.offset(*doc.position(start)):doc.offset(*doc.position(end))]
            name = re.match(r"[A-Za-z_][A-Za-z0-9_.]*", current)
            if name is None:
                continue
            rng = {"start": start, "end": {"line": start["line"], "character": start["character"] + len(name[0])}}
            actions.append({"title": f"Change '{name[0]}' to '{replace}'", "kind": "quickfix", "diagnostics": [diag],
                            "isPreferred": True,
                            "edit": {"changes": {doc.uri: [{"range": rng, "newText": replace}]}}})
        return actions or None

    def to_symbol(doc, s: symbols.Symbol) -> dict:
        out = {"name": s.name, "kind": _SYMBOL_KINDS.get(s.kind, _VARIABLE), "range": _range(doc, s.range),
               "selectionRange": _range(doc, s.selection)}
        if s.detail:
            out["detail"] = s.detail
        if s.children:
            out["children"] = [to_symbol(doc, c) for c in s.children]
        return out

    def document_symbol(params):
        doc, _, _ = opened(params)
        a = server.analysis_of(doc.uri)
        types = {(v.line, v.col): label.lstrip(": ").split(" · ")[0] for v in a.values
                 if (label := analysis.inlay_label(a, v))}
        return [to_symbol(doc, s) for s in symbols.document_symbols(doc.text, a.file, types)]

    def references(params):
        doc, _, (line, col) = opened(params)
        include = bool(params.get("context", {}).get("includeDeclaration", True))
        found = symbols.references(doc.text, line, col, include)
        return [{"uri": doc.uri, "range": _range(doc, r)} for r in found] or None

    def signature_help(params):
        doc, path, (line, col) = opened(params)
        sig = symbols.signature_help(doc.text, line, col, path=path)
        if sig is None:
            return None
        parameters = [{"label": [a, b], **({"documentation": d} if d else {})} for a, b, d in sig.parameters]
        info = {"label": sig.label, "documentation": _markup(sig.documentation), "parameters": parameters}
        out = {"signatures": [info], "activeSignature": 0}
        if sig.active is not None:
            info["activeParameter"] = out["activeParameter"] = sig.active
        return out

    def inlay_hint(params):
        doc, _, _ = opened(params)
        a = server.analysis_of(doc.uri)
        first, last = params["range"]["start"]["line"], params["range"]["end"]["line"]
        out = []
        for v in a.values:
            label = analysis.inlay_label(a, v) if first <= v.line <= last else None
            if label:
                out.append({"position": doc.client_position(v.line, v.end_col), "label": label, "kind": _TYPE_HINT,
                            "tooltip": _markup(analysis.value_markdown(a, v))})
        return out

    def code_lens(params):
        """A lens on every layer value; its title (the kernels the optimiser chose) comes with ``resolve``."""
        doc, _, _ = opened(params)
        a = server.analysis_of(doc.uri)
        return [{"range": doc.client_range(v.line, v.col, v.line, v.end_col),
                 "data": {"uri": doc.uri, "line": v.line, "col": v.col, "version": doc.version}}
                for v in analysis.layer_values(a)]

    def code_lens_resolve(lens):
        """The lens's command: ``rpn2c.viewOutput`` titled with the value's kernels (runs on the worker)."""
        data = lens["data"]
        uri, line, col = data["uri"], int(data["line"]), int(data["col"])
        a = server.analysis_of(uri)
        v = a.value_at(line, col)
        kernels = analysis.value_kernels(a, v) if v is not None else []
        shown = ", ".join(kernels[:LENS_KERNELS]) + (" …" if len(kernels) > LENS_KERNELS else "")
        title = f"{shown} · explain · generated code" if kernels else "explain · generated code"
        return {**lens, "command": {"title": title, "command": VIEW_OUTPUT, "arguments": [uri, line, col]}}

    def execute_command(params):
        """``rpn2c.viewOutput`` with ``[uri, line, character]`` (0-based, character index) of a value: its explain
        text and generated code."""
        uri = target_uri("workspace/executeCommand", params)
        _, line, col = params["arguments"]
        a = server.analysis_of(uri)
        v = a.value_at(line, col) or value_under(a, server.document(uri).text, line, col)
        if v is None:
            return {"title": "no value here", "explain": "", "code": "", "markdown": "No value at this position."}
        return analysis.view_output(a, v)

    return {"textDocument/hover": hover, "textDocument/completion": completion,
            "completionItem/resolve": completion_resolve, "textDocument/definition": definition,
            "textDocument/formatting": formatting, "textDocument/codeAction": code_action,
            "textDocument/documentSymbol": document_symbol, "textDocument/references": references,
            "textDocument/signatureHelp": signature_help, "textDocument/inlayHint": inlay_hint,
            "textDocument/codeLens": code_lens, "codeLens/resolve": code_lens_resolve,
            "workspace/executeCommand": execute_command}
