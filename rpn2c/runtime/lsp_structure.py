"""The language server's requests beyond MLIR's server, answered as the LSP's JSON: rename with prepareRename
(:mod:`rpn2c.runtime.rename`), semantic tokens and folding ranges (:mod:`rpn2c.runtime.structure`), and workspace
symbols (:mod:`rpn2c.runtime.workspace`). Registered on :class:`rpn2c.runtime.lsp.Server` by :func:`requests`.
"""

from __future__ import annotations

from pathlib import Path

from rpn2c.runtime import rename, structure
from rpn2c.runtime.lsp_wire import REQUEST_FAILED, SEMANTIC_LEGEND, Document, ResponseError, uri_path

_SYMBOL_KINDS = {"model": 5, "block": 12, "parameter": 26, "value": 13}  # Class, Function, TypeParameter, Variable
_TYPES = {t: k for k, t in enumerate(SEMANTIC_LEGEND["tokenTypes"])}
_MODIFIERS = {m: 1 << k for k, m in enumerate(SEMANTIC_LEGEND["tokenModifiers"])}


def encode(doc: Document, found: list[structure.SemanticToken]) -> list[int]:
    """The LSP's relative encoding: per token, its line and start relative to the previous one's, its length
    (UTF-16 units), type and modifier bits."""
    data, line, start = [], 0, 0
    for s in found:
        first = doc.client_position(s.line, s.col)["character"]
        length = doc.client_position(s.line, s.col + s.length)["character"] - first
        data += [s.line - line, first - start if s.line == line else first, length, _TYPES[s.type],
                 sum(_MODIFIERS[m] for m in s.modifiers)]
        line, start = s.line, first
    return data


def requests(server) -> dict:
    """The request handlers of ``server`` (a :class:`rpn2c.runtime.lsp.Server`), by method."""

    def opened(params: dict):
        uri = params["textDocument"]["uri"]
        doc = server.document(uri)
        pos = doc.position(params["position"]) if "position" in params else (0, 0)
        return doc, uri_path(uri), pos

    def documents():
        """The document of a file: the open one (its URI as the client spells it), else the text on disk."""
        opened_at = {p.resolve(): d for u, d in server.docs.items() if (p := uri_path(u)) is not None}
        made: dict[Path, Document] = {}

        def at(path: Path) -> Document:
            path = Path(path).resolve()
            if path not in made:
                made[path] = opened_at.get(path) or Document(path.as_uri(), server.workspace.text(path) or "")
            return made[path]
        return at

    def prepare_rename(params):
        doc, path, (line, col) = opened(params)
        try:
            target, r = rename.target(doc.text, line, col, path)
        except rename.RenameError as exc:
            raise ResponseError(REQUEST_FAILED, str(exc)) from None
        return {"range": doc.client_range(*r), "placeholder": target.name}

    def rename_(params):
        doc, path, (line, col) = opened(params)
        try:
            edits = rename.rename(doc.text, line, col, str(params.get("newName", "")), path, server.workspace)
        except rename.RenameError as exc:
            raise ResponseError(REQUEST_FAILED, str(exc)) from None
        changes, at = {}, documents()
        for file, found in edits.items():
            target = doc if file is None else at(file)
            changes[target.uri] = [{"range": target.client_range(*r), "newText": text} for r, text in found]
        return {"changes": changes}

    def semantic_tokens(params):
        doc, _, _ = opened(params)
        return {"data": encode(doc, structure.semantic_tokens(doc.text))}

    def folding_range(params):
        doc, _, _ = opened(params)
        return [{"startLine": f.start, "endLine": f.end, **({"kind": f.kind} if f.kind else {})}
                for f in structure.folding_ranges(doc.text)]

    def workspace_symbol(params):
        out, at = [], documents()
        for s in server.workspace.symbols(str(params.get("query", ""))):
            target = at(s.path)
            sym = {"name": s.name, "kind": _SYMBOL_KINDS[s.kind], "location": {
                "uri": target.uri, "range": target.client_range(s.line, s.col, s.line, s.col + len(s.name))}}
            if s.container:
                sym["containerName"] = s.container
            out.append(sym)
        return out

    return {"textDocument/prepareRename": prepare_rename, "textDocument/rename": rename_,
            "textDocument/semanticTokens/full": semantic_tokens, "textDocument/foldingRange": folding_range,
            "workspace/symbol": workspace_symbol}
