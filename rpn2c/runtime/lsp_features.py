"""The language server's structural and semantic features: outline, references, signature help, inlay hints with
each value's inferred type and parameter count, hover on values (type, shape, parameters, kernels), code lenses and
the ``rpn2c.viewOutput`` command (a layer's ``explain`` and the generated program that runs it).

Registered on the server by :func:`rpn2c.runtime.lsp.create_server`; the analysis is
:mod:`rpn2c.runtime.symbols` (token stream and syntax tree) and :mod:`rpn2c.runtime.analysis` (checked graphs).
"""

from __future__ import annotations

from rpn2c.runtime import analysis, editor, symbols

VIEW_OUTPUT = "rpn2c.viewOutput"

_SYMBOL_KINDS = {"model": "Class", "block": "Function", "parameter": "TypeParameter", "input": "Variable",
                 "head": "Field", "compress": "Field", "recurrent": "Field", "layer": "Struct", "op": "Variable",
                 "alias": "Variable", "block use": "Module", "repeat": "Module"}


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


def register(server, lsp, document, client_range, analysis_of) -> None:
    """Add the features to ``server``; ``analysis_of(uri)`` is the (cached) analysis of a document's text."""

    def rng(doc, r: symbols.Range):
        return client_range(doc, lsp.Range(lsp.Position(r[0], r[1]), lsp.Position(r[2], r[3])))

    def position(doc, pos):
        p = doc.position_from_client_units(pos)
        return p.line, p.character

    def to_symbol(doc, s: symbols.Symbol):
        return lsp.DocumentSymbol(s.name, getattr(lsp.SymbolKind, _SYMBOL_KINDS.get(s.kind, "Variable")),
                                  rng(doc, s.range), rng(doc, s.selection), detail=s.detail or None,
                                  children=[to_symbol(doc, c) for c in s.children] or None)

    @server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def document_symbol(ls, params: lsp.DocumentSymbolParams):
        doc, text, path = document(params.text_document.uri)
        a = analysis_of(params.text_document.uri)
        types = {(v.line, v.col): label.lstrip(": ").split(" · ")[0] for v in a.values
                 if (label := analysis.inlay_label(a, v))}
        return [to_symbol(doc, s) for s in symbols.document_symbols(text, a.file, types)]

    @server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
    def references(ls, params: lsp.ReferenceParams):
        doc, text, _ = document(params.text_document.uri)
        found = symbols.references(text, *position(doc, params.position), params.context.include_declaration)
        return [lsp.Location(doc.uri, rng(doc, r)) for r in found] or None

    @server.feature(lsp.TEXT_DOCUMENT_SIGNATURE_HELP,
                    lsp.SignatureHelpOptions(trigger_characters=["(", ","], retrigger_characters=["="]))
    def signature_help(ls, params: lsp.SignatureHelpParams):
        doc, text, path = document(params.text_document.uri)
        sig = symbols.signature_help(text, *position(doc, params.position), path=path)
        if sig is None:
            return None
        info = lsp.SignatureInformation(
            sig.label, documentation=lsp.MarkupContent(lsp.MarkupKind.Markdown, sig.documentation),
            parameters=[lsp.ParameterInformation((a, b), documentation=d or None) for a, b, d in sig.parameters],
            active_parameter=sig.active)
        return lsp.SignatureHelp([info], active_signature=0, active_parameter=sig.active)

    @server.feature(lsp.TEXT_DOCUMENT_INLAY_HINT, lsp.InlayHintOptions(resolve_provider=False))
    def inlay_hint(ls, params: lsp.InlayHintParams):
        doc, text, _ = document(params.text_document.uri)
        a = analysis_of(params.text_document.uri)
        first, last = params.range.start.line, params.range.end.line
        out = []
        for v in a.values:
            label = analysis.inlay_label(a, v) if first <= v.line <= last else None
            if label:
                pos = rng(doc, (v.line, v.end_col, v.line, v.end_col)).start
                out.append(lsp.InlayHint(pos, label, kind=lsp.InlayHintKind.Type,
                                         tooltip=lsp.MarkupContent(lsp.MarkupKind.Markdown,
                                                                   analysis.value_markdown(a, v))))
        return out

    @server.feature(lsp.TEXT_DOCUMENT_CODE_LENS, lsp.CodeLensOptions(resolve_provider=False))
    def code_lens(ls, params: lsp.CodeLensParams):
        doc, _, _ = document(params.text_document.uri)
        a = analysis_of(params.text_document.uri)
        return [lsp.CodeLens(rng(doc, (v.line, v.col, v.line, v.end_col)),
                             lsp.Command(title="explain · generated code", command=VIEW_OUTPUT,
                                         arguments=[doc.uri, v.line, v.col]))
                for v in analysis.layer_values(a)]

    @server.command(VIEW_OUTPUT)
    def view_output(ls, *args):
        """``[uri, line, character]`` (0-based, server units) of a value: its explain text and generated code."""
        if len(args) != 3:
            raise ValueError(f"{VIEW_OUTPUT} takes [uri, line, character], got {list(args)}")
        uri, line, col = str(args[0]), int(args[1]), int(args[2])
        a = analysis_of(uri)
        _, text, _ = document(uri)
        v = a.value_at(line, col) or value_under(a, text, line, col)
        if v is None:
            return {"title": "no value here", "explain": "", "code": "", "markdown": "No value at this position."}
        return analysis.view_output(a, v)

    return None


def value_hover(a: analysis.Analysis, text: str, line: int, col: int) -> editor.Hover | None:
    """A value under the cursor: its type, shape, parameter count and kernels, then its definition's text."""
    v = value_under(a, text, line, col)
    if v is None or not v.instances:
        return None
    toks = editor.tokens(text)
    t = toks[editor._at(toks, editor.offset_of(text, line, col))]
    src = text.splitlines()[v.line].strip().rstrip("{").rstrip()
    return editor.Hover(analysis.value_markdown(a, v) + f"\n\n`{src}`", t.line - 1, t.column - 1, t.end_column - 1)
