"""The language server, driven by pygls's own client over real LSP messages against `rpn2c lsp` in a subprocess
(initialize, didOpen/didChange, publishDiagnostics, hover, completion, definition, formatting, code actions,
document symbols, references, signature help, inlay hints, code lenses and their resolution, executeCommand on the
worker with cancellation, debounced checks, rename, semantic tokens, folding ranges, workspace symbols)."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

import rpn2c
from rpn2c.components.registry import REGISTRY, SLOT_FAMILIES, lookup, names
from rpn2c.passes import optimize
from rpn2c.runtime.lsp_features import VIEW_OUTPUT
from rpn2c.syntax.format import format_program
from rpn2c.syntax.parser import parse

ROOT = Path(__file__).resolve().parents[1]
CNN = (ROOT / "specs" / "cnn.rpn").read_text(encoding="utf-8")
TRANSFORMER = (ROOT / "specs" / "transformer.rpn").read_text(encoding="utf-8")


class Session:
    """A client and a server process; the client's event loop runs on a thread so tests stay synchronous."""

    def __init__(self, workspace: Path, options: dict | None = None):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = LanguageClient("rpn2c-tests", "1")
        self.published: dict[str, list[lsp.PublishDiagnosticsParams]] = {}
        self.changed = threading.Condition()

        @self.client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _diagnostics(params: lsp.PublishDiagnosticsParams):
            with self.changed:
                self.published.setdefault(params.uri, []).append(params)
                self.changed.notify_all()

        self.run(self.client.start_io(sys.executable, "-m", "rpn2c", "lsp", cwd=str(ROOT)))
        result = self.run(self.client.initialize_async(lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(), root_uri=workspace.as_uri(), initialization_options=options,
            workspace_folders=[lsp.WorkspaceFolder(workspace.as_uri(), "ws")])))
        self.capabilities = result.capabilities
        self.notify(self.client.initialized, lsp.InitializedParams())

    def run(self, awaitable, timeout: float = 60):
        async def wait():
            return await awaitable
        return asyncio.run_coroutine_threadsafe(wait(), self.loop).result(timeout)

    def notify(self, fn, params) -> None:
        self.loop.call_soon_threadsafe(fn, params)

    def on_loop(self, fn):
        """Call ``fn`` on the client's loop (messages it sends leave in order) and return its result."""
        async def call():
            return fn()
        return self.run(call())

    def open(self, path: Path, text: str, version: int = 1) -> list[lsp.Diagnostic]:
        self.notify(self.client.text_document_did_open,
                    lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(path.as_uri(), "rpn", version, text)))
        return self.diagnostics(path, version)

    def change(self, path: Path, text: str, version: int) -> list[lsp.Diagnostic]:
        self.notify(self.client.text_document_did_change, lsp.DidChangeTextDocumentParams(
            lsp.VersionedTextDocumentIdentifier(version, path.as_uri()),
            [lsp.TextDocumentContentChangeWholeDocument(text)]))
        return self.diagnostics(path, version)

    def diagnostics(self, path: Path, version: int, timeout: float = 60) -> list[lsp.Diagnostic]:
        uri = path.as_uri()
        with self.changed:
            ok = self.changed.wait_for(lambda: any(p.version == version for p in self.published.get(uri, [])),
                                       timeout)
            assert ok, f"no diagnostics for {uri} version {version}"
            return list(next(p for p in self.published[uri] if p.version == version).diagnostics)

    def close(self) -> None:
        try:
            self.run(self.client.shutdown_async(None), timeout=20)
            self.notify(self.client.exit, None)
            self.loop.call_soon_threadsafe(self.client._server.stdin.close)  # as an editor does: end of input
            self.run(self.client.stop(), timeout=20)
            assert self.client._server.returncode == 0  # a clean exit after shutdown
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    (ws / "lib.rpn").write_text("block mlp(width = 16) {\n  input x\n  h = head(x) {\n    out = width\n  }\n"
                                "  return h\n}\n", encoding="utf-8")
    return ws


@pytest.fixture(scope="module")
def session(workspace):
    s = Session(workspace)
    yield s
    s.close()


def at(text: str, marker: str, shift: int = 0) -> lsp.Position:
    """The position right after the first ``marker`` (plus ``shift`` characters)."""
    idx = text.index(marker) + len(marker) + shift
    return lsp.Position(text[:idx].count("\n"), idx - (text[:idx].rfind("\n") + 1))


def doc(path: Path) -> lsp.TextDocumentIdentifier:
    return lsp.TextDocumentIdentifier(path.as_uri())


def test_server_announces_every_feature(session):
    caps = session.capabilities
    assert caps.hover_provider and caps.definition_provider and caps.document_formatting_provider
    assert {"=", "(", ","} <= set(caps.completion_provider.trigger_characters)
    assert caps.code_action_provider
    assert caps.document_symbol_provider and caps.references_provider and caps.inlay_hint_provider
    assert {"(", ","} <= set(caps.signature_help_provider.trigger_characters)
    assert caps.code_lens_provider and list(caps.execute_command_provider.commands) == [VIEW_OUTPUT]
    assert caps.code_lens_provider.resolve_provider
    # beyond MLIR's server
    assert caps.rename_provider.prepare_provider and caps.folding_range_provider and caps.workspace_symbol_provider
    legend = caps.semantic_tokens_provider.legend
    assert caps.semantic_tokens_provider.full and "parameter" in legend.token_types
    assert set(legend.token_types) <= {t.value for t in lsp.SemanticTokenTypes}  # the LSP's standard names
    assert set(legend.token_modifiers) <= {m.value for m in lsp.SemanticTokenModifiers}


def test_diagnostics_as_you_type_report_every_error_with_code_range_and_hint(session, workspace):
    path = workspace / "cnn.rpn"
    assert session.open(path, CNN) == []
    bad = (CNN.replace("patch_max(size = 2)", "patch_maxx(size = 2)", 1)
              .replace("grid_patch(size = 3, pad = 1)", "grid_patch(size = 3, padd = 1)", 1))
    diags = session.change(path, bad, 2)
    by_code = {d.code: d for d in diags}
    assert set(by_code) == {"E0201", "E0302"}  # both errors in one pass
    unknown = by_code["E0201"]
    line = bad.splitlines()[unknown.range.start.line]
    assert line[unknown.range.start.character:unknown.range.end.character] == "patch_maxx"
    assert "did you mean 'patch_max'?" in unknown.message and unknown.source == "rpn2c"
    assert unknown.severity == lsp.DiagnosticSeverity.Error
    # the did-you-mean hint is a quick fix that replaces the name
    actions = session.run(session.client.text_document_code_action_async(lsp.CodeActionParams(
        doc(path), unknown.range, lsp.CodeActionContext([unknown]))))
    assert [a.title for a in actions] == ["Change 'patch_maxx' to 'patch_max'"]
    (edit,) = actions[0].edit.changes[path.as_uri()]
    assert edit.new_text == "patch_max" and edit.range == unknown.range
    # a parse error is one located diagnostic; fixing the text clears everything
    (syntax,) = session.change(path, CNN.replace("out = 16", "out = = 16", 1), 3)
    assert syntax.code == "E0102" and syntax.range.start == at(CNN, "out = ")
    assert session.change(path, CNN, 4) == []


def test_imports_resolve_and_errors_inside_an_import_show_on_its_line(session, workspace):
    text = ('import "lib.rpn" as lib\nmodel m {\n  input x: vector[B, 4]\n  y = lib.mlp(x, width = 8)\n'
            '  return y\n}\n')
    path = workspace / "uses_lib.rpn"
    assert session.open(path, text) == []
    defn = session.run(session.client.text_document_definition_async(lsp.DefinitionParams(
        doc(path), at(text, "lib.ml"))))
    assert [(d.uri, d.range.start.line, d.range.start.character) for d in defn] == [
        ((workspace / "lib.rpn").as_uri(), 0, 6)]
    on_import = session.run(session.client.text_document_definition_async(lsp.DefinitionParams(
        doc(path), at(text, '"lib.r'))))
    assert [d.uri for d in on_import] == [(workspace / "lib.rpn").as_uri()]
    hover = session.run(session.client.text_document_hover_async(lsp.HoverParams(doc(path), at(text, "lib.ml"))))
    assert "block mlp(width = 16)" in hover.contents.value
    items = session.run(session.client.text_document_completion_async(lsp.CompletionParams(
        doc(path), at(text, "lib.mlp(x, "))))
    assert [i.label for i in items.items] == ["width"]
    missing = text.replace("lib.rpn", "nowhere.rpn")
    (diag,) = session.change(path, missing, 2)
    assert diag.code == "E0504" and diag.range.start.line == 0


def test_hover_shows_the_registry_doc_defaults_and_hyper_parameters(session, workspace):
    path = workspace / "cnn.rpn"
    session.change(path, CNN, 10)
    hover = session.run(session.client.text_document_hover_async(lsp.HoverParams(
        doc(path), at(CNN, "kappa = patch_m"))))
    entry = lookup("patch_max", ("compression",))
    text = hover.contents.value
    assert hover.contents.kind == lsp.MarkupKind.Markdown and entry.doc in text and "compression" in text
    assert "| `size` |" in text and "| `stride` |" in text
    line = CNN.splitlines()[hover.range.start.line]
    assert line[hover.range.start.character:hover.range.end.character] == "patch_max"
    hp = session.run(session.client.text_document_hover_async(lsp.HoverParams(doc(path), at(CNN, "size = 3, pa"))))
    assert hp.contents.value.startswith("**pad**:") and "`0`" in hp.contents.value and "grid_patch" in hp.contents.value
    slot = session.run(session.client.text_document_hover_async(lsp.HoverParams(doc(path), at(CNN, "    xi_attr"))))
    assert "interdependence" in slot.contents.value
    nothing = session.run(session.client.text_document_hover_async(lsp.HoverParams(doc(path), at(CNN, "# cnn"))))
    assert nothing is None


@pytest.mark.parametrize("slot", ["kappa", "psi", "pi", "xi_instance", "post"])
def test_completion_offers_exactly_the_components_of_the_slot(session, workspace, slot):
    text = "model m {\n  input x: vector[B, 4]\n  y = head(x) {\n    SLOT = \n  }\n  return y\n}\n"
    if slot == "post":
        text = text.replace("SLOT = ", "post = [relu, ")
    text = text.replace("SLOT", slot)
    path = workspace / f"complete_{slot}.rpn"
    session.open(path, text)
    pos = at(text, "relu, " if slot == "post" else f"{slot} = ")
    items = session.run(session.client.text_document_completion_async(lsp.CompletionParams(doc(path), pos)))
    labels = [i.label for i in items.items]
    assert len(labels) == len(set(labels))  # each component once: its name, and only aliases of other words
    assert {e.cls.name for f in SLOT_FAMILIES[slot] for e in REGISTRY[f].values()} <= set(labels) <= set(
        names(SLOT_FAMILIES[slot]))
    assert not any(label.endswith("_expansion") and lookup(label, ("expansion",)).cls.name != label
                   for label in labels)
    assert all(i.kind == lsp.CompletionItemKind.Function for i in items.items)
    first = items.items[0]
    assert first.documentation is None and first.detail.startswith(first.data["family"])
    resolved = session.run(session.client.completion_item_resolve_async(first))
    entry = REGISTRY[first.data["family"]][first.label]
    assert entry.doc in resolved.documentation.value and first.data["family"] in SLOT_FAMILIES[slot]


def test_completion_of_hyper_parameters_and_settings(session, workspace):
    text = ("model m {\n  input x: image[B, 1, 8, 8]\n  y = head(x) {\n    xi_attribute = grid_patch(size = 3, )\n"
            "    ou\n  }\n  return y\n}\n")
    path = workspace / "complete_hp.rpn"
    session.open(path, text)
    items = session.run(session.client.text_document_completion_async(lsp.CompletionParams(
        doc(path), at(text, "size = 3, "))))
    schema = REGISTRY["interdependence"]["grid_patch"].schema
    assert [i.label for i in items.items] == [k for k in schema.model_fields if k != "size"]
    assert all(i.kind == lsp.CompletionItemKind.Property for i in items.items)
    keys = session.run(session.client.text_document_completion_async(lsp.CompletionParams(
        doc(path), at(text, "    ou"))))
    labels = [i.label for i in keys.items]
    assert "out" in labels and "kappa" in labels and "xi_attribute" not in labels  # already set


def test_go_to_definition_of_a_block_and_a_value(session, workspace):
    text = (ROOT / "specs" / "transformer.rpn").read_text(encoding="utf-8")
    path = workspace / "transformer.rpn"
    session.open(path, text)
    (block,) = session.run(session.client.text_document_definition_async(lsp.DefinitionParams(
        doc(path), at(text, "y = enco"))))
    assert block.uri == path.as_uri() and block.range.start == at(text, "\nblock ")
    (value,) = session.run(session.client.text_document_definition_async(lsp.DefinitionParams(
        doc(path), at(text, "add(at"))))
    assert value.range.start == at(text, "  attn = head", -len("attn = head"))


def test_formatting_returns_the_rpn2c_fmt_text(session, workspace):
    messy = "model m(k=2){input x:vector[B,4]\n  y=head(x){out=k*2   post=[relu]}  # note\nreturn y}\n"
    path = workspace / "messy.rpn"
    session.open(path, messy)
    opts = lsp.FormattingOptions(tab_size=2, insert_spaces=True)
    (edit,) = session.run(session.client.text_document_formatting_async(lsp.DocumentFormattingParams(
        doc(path), opts)))
    assert edit.new_text == format_program(parse(messy)) and edit.range.start == lsp.Position(0, 0)
    session.change(path, edit.new_text, 2)
    assert list(session.run(session.client.text_document_formatting_async(
        lsp.DocumentFormattingParams(doc(path), opts)))) == []


def test_the_server_runs_without_a_protocol_library(monkeypatch):
    """`rpn2c lsp` is plain JSON-RPC: with pygls and lsprotocol unimportable it answers, publishes and exits."""
    import io

    from rpn2c.runtime.lsp import Server
    from rpn2c.runtime.lsp_wire import read_message, write_message

    for name in ("pygls", "pygls.lsp.server", "lsprotocol", "lsprotocol.types"):
        monkeypatch.setitem(sys.modules, name, None)
    uri = (ROOT / "specs" / "cnn.rpn").as_uri()
    rx = io.BytesIO()
    for message in ({"id": 1, "method": "initialize", "params": {"capabilities": {}}},
                    {"method": "initialized", "params": {}},
                    {"method": "textDocument/didOpen", "params": {"textDocument": {
                        "uri": uri, "languageId": "rpn", "version": 3, "text": CNN.replace("out = 16", "out = nope")}}},
                    {"id": 2, "method": "textDocument/nope", "params": {}},
                    {"id": 3, "method": "shutdown"}, {"method": "exit"}):
        write_message(rx, message)
    rx.seek(0)
    tx = io.BytesIO()
    assert Server(rx, tx).serve() == 0
    tx.seek(0)
    out = []
    while (message := read_message(tx)) is not None:
        out.append(message)
    assert out[0]["id"] == 1 and out[0]["result"]["serverInfo"]["name"] == "rpn2c"
    (published,) = [m["params"] for m in out if m.get("method") == "textDocument/publishDiagnostics"]
    assert published["uri"] == uri and published["version"] == 3
    (diag,) = published["diagnostics"]
    assert diag["code"] == "E0202" and "'nope'" in diag["message"] and diag["severity"] == 1
    assert next(m for m in out if m.get("id") == 2)["error"]["code"] == -32601  # method not found
    assert next(m for m in out if m.get("id") == 3)["result"] is None


def test_ranges_are_in_the_clients_utf16_units(session, workspace):
    text = 'model m {\n  input x: vector[B, 4]\n  y = head(x) { bias = "\U0001d705"  psi = nope }\n  return y\n}\n'
    diags = session.open(workspace / "astral.rpn", text)
    (unknown,) = [d for d in diags if d.code == "E0201"]
    line = text.splitlines()[2]
    start = len(line[:line.index("nope")].encode("utf-16-le")) // 2  # the astral character is 2 UTF-16 units
    assert (unknown.range.start.character, unknown.range.end.character) == (start, start + 4)


# ------------------------------------------------------------------------------------------------ structure
def test_document_symbols_outline_models_blocks_and_values_with_their_types(session, workspace):
    path = workspace / "outline.rpn"
    session.open(path, TRANSFORMER)
    found = session.run(session.client.text_document_document_symbol_async(lsp.DocumentSymbolParams(doc(path))))
    assert [(s.name, s.kind) for s in found] == [("encoder", lsp.SymbolKind.Function),
                                                 ("transformer", lsp.SymbolKind.Class)]
    enc, model = found
    assert enc.selection_range.start == at(TRANSFORMER, "\nblock ")
    assert enc.range.start == at(TRANSFORMER, "\nblock ", -len("block "))
    assert enc.range.end.line == TRANSFORMER.splitlines().index("}", enc.range.start.line)
    children = {c.name: c for c in enc.children}
    assert list(children) == ["d", "heads", "ffn", "x", "attn", "ff", "ff2", "y"]
    assert children["attn"].kind == lsp.SymbolKind.Field and children["d"].kind == lsp.SymbolKind.TypeParameter
    assert children["attn"].detail == "head sequence[B, T, 32]" and children["ff"].detail == "head sequence[B, T, 64]"
    assert children["attn"].range.end.line == children["attn"].range.start.line + 7  # the whole `{ ... }`
    (y,) = [c for c in model.children if c.name == "y"]
    assert y.kind == lsp.SymbolKind.Module and y.detail == "block use sequence[B, T, 32]"


def test_references_of_a_value_a_parameter_and_a_block(session, workspace):
    path = workspace / "refs.rpn"
    session.open(path, TRANSFORMER)
    lines = TRANSFORMER.splitlines()

    def refs(marker, declaration=True):
        found = session.run(session.client.text_document_references_async(lsp.ReferenceParams(
            lsp.ReferenceContext(declaration), doc(path), at(TRANSFORMER, marker))))
        assert all(r.uri == path.as_uri() for r in found)
        return [(r.range.start.line, lines[r.range.start.line][r.range.start.character:r.range.end.character])
                for r in found]

    attn = lines.index("  attn = head(x) {")
    ff, add = lines.index("  ff = head(attn) {"), lines.index("  y = layer_norm(add(attn, ff2))")
    assert refs("add(at") == [(attn, "attn"), (ff, "attn"), (add, "attn")]
    assert refs("add(at", declaration=False) == [(ff, "attn"), (add, "attn")]
    # a parameter: its declaration and uses in its block, not the model's `heads = heads` (another scope)
    assert [n for _, n in refs("block encoder(d = 32, hea")] == ["heads"] * 4
    block = lines.index("block encoder(d = 32, heads = 4, ffn = 64) {")
    assert refs("y = enco") == [(block, "encoder"), (lines.index("  y = encoder(x, d = d, heads = heads)"),
                                                     "encoder")]


def test_signature_help_follows_the_parameter_being_written(session, workspace):
    text = ("model m {\n  input x: vector[B, 4]\n  y = head(x) {\n    kappa = chebyshev(d = 2, )\n  }\n"
            "  return y\n}\n")
    path = workspace / "signature.rpn"
    session.open(path, text)

    def help_at(marker):
        return session.run(session.client.text_document_signature_help_async(lsp.SignatureHelpParams(
            doc(path), at(text, marker))))

    fields = REGISTRY["expansion"]["chebyshev"].schema.model_fields
    sig = help_at("chebyshev(")
    (info,) = sig.signatures
    params = [info.label[a:b] for a, b in (p.label for p in info.parameters)]
    assert params == [f"{k}: {t}" for k, t in (("d", "int = 2"), ("kind", "1 | 2 = 1"))]
    assert [k for k in fields] == ["d", "kind"] and info.label.startswith("chebyshev(")
    assert sig.active_parameter == 0 and "Chebyshev" in info.documentation.value
    assert help_at("d = 2, ").active_parameter == 1  # d given: kind is next
    assert help_at("d = ").active_parameter == 0
    assert help_at("input x") is None  # not inside a call


# ------------------------------------------------------------------------------------------------ checked values
def test_inlay_hints_give_every_values_inferred_type_and_parameter_count(session, workspace):
    path = workspace / "hints.rpn"
    session.open(path, TRANSFORMER)
    lines = TRANSFORMER.splitlines()
    hints = session.run(session.client.text_document_inlay_hint_async(lsp.InlayHintParams(
        doc(path), lsp.Range(lsp.Position(0, 0), lsp.Position(len(lines), 0)))))
    graph = rpn2c.check(TRANSFORMER)
    by_name = {lines[h.position.line][:h.position.character].strip(): h for h in hints}
    assert all(h.kind == lsp.InlayHintKind.Type for h in hints)
    for nid in ("y.attn", "y.ff", "y.ff2"):
        node = graph.node(nid)
        assert by_name[nid[2:]].label == f": {node.type} · {node.params:,} params"
    model_y = next(h for h in hints if lines[h.position.line].startswith("  y = encoder"))
    assert model_y.label == f": {graph.node('y.y').type} · {graph.param_count:,} params"  # the whole block use
    assert by_name["input x"].label == ": sequence[B, T, 32]"  # the block's untyped input, as used
    later = session.run(session.client.text_document_inlay_hint_async(lsp.InlayHintParams(
        doc(path), lsp.Range(lsp.Position(30, 0), lsp.Position(len(lines), 0)))))
    assert [h.position.line for h in later] == [34, 35]  # only the range asked for
    assert session.change(path, TRANSFORMER.replace("out = ffn", "out = nope"), 2)  # the model no longer checks
    assert list(session.run(session.client.text_document_inlay_hint_async(lsp.InlayHintParams(
        doc(path), lsp.Range(lsp.Position(0, 0), lsp.Position(len(lines), 0)))))) == []  # nothing stale


def test_hover_on_a_value_gives_its_type_shape_parameters_and_kernels(session, workspace):
    path = workspace / "value_hover.rpn"
    assert session.open(path, TRANSFORMER) == []
    graph = optimize(rpn2c.check(TRANSFORMER))
    node = graph.node("y.attn")
    for marker in ("\n  att", "add(at"):  # at its binding and at a use
        hover = session.run(session.client.text_document_hover_async(lsp.HoverParams(doc(path), at(TRANSFORMER,
                                                                                                       marker))))
        text = hover.contents.value
        assert text.startswith("**attn** — head in block `encoder`")
        assert f"| `y.attn` (transformer) | `{node.type}` | B × T × 32 (items) | {node.params:,} | " \
               f"{', '.join(node.plan)} |" in text
        assert node.plan and "`attn = head(x)`" in text
    model_y = session.run(session.client.text_document_hover_async(lsp.HoverParams(doc(path), at(
        TRANSFORMER, "\n  y = enc", -6))))
    assert f"{graph.param_count:,}" in model_y.contents.value and "block use" not in model_y.contents.value


def test_code_lens_and_view_output_show_explain_and_the_generated_code(session, workspace):
    path = workspace / "view.rpn"
    session.open(path, TRANSFORMER)
    found = session.run(session.client.text_document_code_lens_async(lsp.CodeLensParams(doc(path))))
    lines = TRANSFORMER.splitlines()
    named = [lines[c.range.start.line][c.range.start.character:c.range.end.character] for c in found]
    assert named == ["attn", "ff", "ff2", "y"]  # layers, and the model's block use; not ops or inputs
    assert all(c.command is None for c in found)  # titled by resolve, on the worker
    lenses = [session.run(session.client.code_lens_resolve_async(c)) for c in found]
    graph = optimize(rpn2c.check(TRANSFORMER))
    assert [c.range for c in lenses] == [c.range for c in found]
    kernels = graph.node("y.attn").plan
    assert lenses[0].command.title == f"{', '.join(kernels[:3])}{' …' if len(kernels) > 3 else ''} · explain · " \
                                      "generated code"
    lens = lenses[0]
    assert lens.command.command == VIEW_OUTPUT and lens.command.arguments[0] == path.as_uri()
    out = session.run(session.client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        lens.command.command, lens.command.arguments)))
    assert out["explain"].splitlines()[0].endswith(": y.attn = head  sequence[B, T, 32]  (4 heads: ξ_instance="
                                                   "low_rank_bilinear(bias=True, rank=8); fusion=concat_linear(out=32);"
                                                   " π=identity)")
    assert "fused_heads" in out["explain"] and "y.ff" not in out["explain"]
    code = out["code"].splitlines()
    assert code[1] == "y_attn = self.y.attn" and any("fused_sdpa" in c for c in code)
    assert not any("self.y.ff" in c for c in code)  # only the lines that run this layer
    whole = session.run(session.client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        VIEW_OUTPUT, lenses[-1].command.arguments)))
    assert all(f"self.y.{n}" in whole["code"] for n in ("attn", "ff", "ff2", "y_add", "y("))
    assert "```python" in whole["markdown"]
    # a lens made for an older text is not resolved: the client asks for the new lenses
    from pygls.exceptions import JsonRpcException

    session.change(path, TRANSFORMER + "\n", 2)
    with pytest.raises(JsonRpcException) as stale:
        session.run(session.client.code_lens_resolve_async(found[0]))
    assert stale.value.code == -32801  # ContentModified


# ------------------------------------------------------------------------------------------------ debounce
def test_a_burst_of_changes_is_checked_once_typing_pauses_and_the_latest_text_wins(session, workspace):
    path = workspace / "burst.rpn"
    uri = path.as_uri()
    assert session.open(path, CNN) == []
    n = 12
    texts = [CNN.replace("out = 16", f"out = {'x' * k}16", 1) for k in range(1, n)]
    final = CNN.replace("patch_max(size = 2)", "patch_maxx(size = 2)", 1)
    for version, text in enumerate([*texts, final], start=2):  # as fast as a client sends keystrokes
        session.notify(session.client.text_document_did_change, lsp.DidChangeTextDocumentParams(
            lsp.VersionedTextDocumentIdentifier(version, uri), [lsp.TextDocumentContentChangeWholeDocument(text)]))
    (diag,) = session.diagnostics(path, n + 1)
    assert diag.code == "E0201" and "patch_maxx" in diag.message  # the final text's diagnostics
    published = [p.version for p in session.published[uri]]
    assert len(published) - 1 < n / 2 and published[-1] == n + 1  # far fewer checks than changes


# ------------------------------------------------------------------------------------------------ heavy requests
def _view(text: str, path: Path, marker: str) -> lsp.ExecuteCommandParams:
    pos = at(text, marker)
    return lsp.ExecuteCommandParams(VIEW_OUTPUT, [path.as_uri(), pos.line, pos.character])


def test_diagnostics_and_light_requests_never_wait_for_the_first_view_output(workspace):
    """A fresh server: its first viewOutput (the worker starts, imports torch, builds the model) is still running
    when an edit made after it has been checked and published and a hover answered; a second viewOutput queued
    behind it is cancelled (RequestCancelled), a third is superseded by the edit (ContentModified), and the first
    answers for the text it was asked about."""
    from pygls.exceptions import JsonRpcException, JsonRpcRequestCancelled

    s = Session(workspace, {"debounce_ms": 0})
    try:
        path = workspace / "busy.rpn"
        assert s.open(path, TRANSFORMER) == []
        order: list[str] = []
        with s.changed:
            s.published.clear()

        def send():
            send = s.client.protocol.send_request_async
            first = send("workspace/executeCommand", _view(TRANSFORMER, path, "\n  att"), msg_id=101)
            cancelled = send("workspace/executeCommand", _view(TRANSFORMER, path, "\n  ff"), msg_id=102)
            stale = send("workspace/executeCommand", _view(TRANSFORMER, path, "\n  ff2"), msg_id=103)
            first.add_done_callback(lambda _: order.append("viewOutput"))
            s.client.cancel_request(lsp.CancelParams(id=102))
            s.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                lsp.VersionedTextDocumentIdentifier(2, path.as_uri()),
                [lsp.TextDocumentContentChangeWholeDocument(TRANSFORMER.replace("out = ffn", "out = nope"))]))
            return first, cancelled, stale

        first, cancelled, stale = s.on_loop(send)
        (diag,) = s.diagnostics(path, 2)
        order.append("diagnostics")
        hover = s.run(s.client.text_document_hover_async(lsp.HoverParams(doc(path), at(TRANSFORMER, "layer_no"))))
        order.append("hover")
        assert diag.code == "E0202" and "**layer_norm**" in hover.contents.value
        with pytest.raises(JsonRpcRequestCancelled):
            s.run(cancelled)
        with pytest.raises(JsonRpcException) as modified:
            s.run(stale)
        assert modified.value.code == -32801  # ContentModified (pygls has no class of its own for it)
        out = s.run(first)
        assert order == ["diagnostics", "hover", "viewOutput"]
        assert ": y.attn = head" in out["explain"].splitlines()[0]  # version 1's model: version 2 does not check
        # a running job cancelled (the cancel leaves with it, before the worker can answer): answered at once, and
        # the worker goes on to the next

        def send_and_cancel():
            running = s.client.protocol.send_request_async(
                "workspace/executeCommand", _view(TRANSFORMER, path, "\n  att"), msg_id=104)
            s.client.cancel_request(lsp.CancelParams(id=104))
            return running

        running = s.on_loop(send_and_cancel)
        with pytest.raises(JsonRpcRequestCancelled):
            s.run(running)
        s.change(path, TRANSFORMER, 3)
        again = s.run(s.client.workspace_execute_command_async(_view(TRANSFORMER, path, "\n  ff2")))
        assert ": y.ff2 = head" in again["explain"].splitlines()[0]
    finally:
        s.close()


def test_heavy_requests_with_bad_arguments_are_refused_without_the_worker(session, workspace):
    from pygls.exceptions import JsonRpcInvalidParams

    for params in (lsp.ExecuteCommandParams("rpn2c.nope", []), lsp.ExecuteCommandParams(VIEW_OUTPUT, ["x", 1])):
        with pytest.raises(JsonRpcInvalidParams):
            session.run(session.client.workspace_execute_command_async(params))


# ------------------------------------------------------------------------------------------------ beyond MLIR's server
LIB = "block mlp(width = 16) {\n  input x\n  h = head(x) {\n    out = width\n  }\n  return h\n}\n"
USE = ('import "rename_lib.rpn" as lib\nmodel m {\n  input x: vector[B, 4]\n  y = lib.mlp(x, width = 8)\n'
       '  return y\n}\n')


def _edits(edit: lsp.WorkspaceEdit, texts: dict[str, str]) -> dict[str, list[tuple[int, str]]]:
    """Each file's edits as (line, the text they replace)."""
    out = {}
    for uri, found in edit.changes.items():
        lines = texts[uri].splitlines()
        out[uri] = sorted((e.range.start.line, lines[e.range.start.line][e.range.start.character:
                                                                         e.range.end.character]) for e in found)
        assert {e.new_text for e in found} == {found[0].new_text}
    return out


def test_rename_a_block_parameter_everywhere_a_call_writes_it_across_the_workspace(session, workspace):
    from pygls.exceptions import JsonRpcException

    lib, use = workspace / "rename_lib.rpn", workspace / "rename_use.rpn"
    lib.write_text(LIB, encoding="utf-8")
    use.write_text(USE, encoding="utf-8")  # on disk only: the workspace's files take part too
    assert session.open(lib, LIB) == []
    texts = {lib.as_uri(): LIB, use.as_uri(): USE}
    prepared = session.run(session.client.text_document_prepare_rename_async(lsp.PrepareRenameParams(
        doc(lib), at(LIB, "out = wid"))))
    assert prepared.placeholder == "width" and prepared.range.start == at(LIB, "out = ")
    edit = session.run(session.client.text_document_rename_async(lsp.RenameParams(
        doc(lib), at(LIB, "mlp(wi"), "size")))
    assert _edits(edit, texts) == {lib.as_uri(): [(0, "width"), (3, "width")], use.as_uri(): [(3, "width")]}
    # the block itself, from the file that imports it
    session.open(use, USE)
    edit = session.run(session.client.text_document_rename_async(lsp.RenameParams(
        doc(use), at(USE, "lib.ml"), "perceptron")))
    assert _edits(edit, texts) == {lib.as_uri(): [(0, "mlp")], use.as_uri(): [(3, "mlp")]}
    # refused, with the reason
    for marker, reason in (("= hea", "'head' is a keyword"), ("    ou", "'out' is a setting"),
                           ("vect", "'vector' is a tensor type")):
        text, path = (LIB, lib) if marker != "vect" else (USE, use)
        with pytest.raises(JsonRpcException) as refused:
            session.run(session.client.text_document_prepare_rename_async(lsp.PrepareRenameParams(
                doc(path), at(text, marker))))
        assert refused.value.code == -32803 and reason in refused.value.message  # RequestFailed
    with pytest.raises(JsonRpcException) as taken:
        session.run(session.client.text_document_rename_async(lsp.RenameParams(doc(lib), at(LIB, "h = hea", -6),
                                                                               "x")))
    assert "'x' is already a value of mlp" in taken.value.message


def _decode(data: list[int], legend: lsp.SemanticTokensLegend, text: str) -> list[tuple[str, str, set[str]]]:
    lines, line, start, out = text.splitlines(), 0, 0, []
    for k in range(0, len(data), 5):
        dl, ds, length, kind, mods = data[k:k + 5]
        line, start = line + dl, (start + ds if dl == 0 else ds)
        word = lines[line][start:start + length]
        out.append((word, legend.token_types[kind], {m for b, m in enumerate(legend.token_modifiers) if mods >> b & 1}))
    return out


def test_semantic_tokens_colour_each_name_by_what_it_is(session, workspace):
    path = workspace / "colours.rpn"
    session.open(path, TRANSFORMER)
    tokens = session.run(session.client.text_document_semantic_tokens_full_async(lsp.SemanticTokensParams(
        doc(path))))
    found = _decode(tokens.data, session.capabilities.semantic_tokens_provider.legend, TRANSFORMER)
    assert [m for w, t, m in found if w == "encoder"] == [{"declaration"}, set()]  # the block, then its call
    assert ("transformer", "class", {"declaration"}) in found
    assert ("relu", "function", {"defaultLibrary"}) in found and ("layer_norm", "function", {"defaultLibrary"}) in found
    assert ("heads", "parameter", {"declaration"}) in found and ("attn", "variable", {"declaration"}) in found
    assert ("sequence", "type", set()) in found and ("B", "typeParameter", set()) in found
    assert ("xi_instance", "property", set()) in found and ("rank", "property", set()) in found
    assert ("head", "keyword", set()) in found and ("true", "keyword", set()) in found
    comments = [w for w, t, _ in found if t == "comment"]
    assert comments and all(c.startswith("#") for c in comments)
    assert len(comments) == sum(1 for ln in TRANSFORMER.splitlines() if "#" in ln)


def test_folding_ranges_cover_bodies_multi_line_calls_and_comment_runs(session, workspace):
    text = ("# a model\n# over two lines\nmodel m {\n  input x: vector[B, 4]\n  y = head(x) {\n"
            "    kappa = chebyshev(\n      d = 3)\n    out = 2\n  }\n  return y\n}\n")
    path = workspace / "folds.rpn"
    session.open(path, text)
    folds = session.run(session.client.text_document_folding_range_async(lsp.FoldingRangeParams(doc(path))))
    got = {(f.start_line, f.end_line, f.kind) for f in folds}
    assert got == {(0, 1, lsp.FoldingRangeKind.Comment), (2, 9, None), (4, 7, None), (5, 6, None)}


def test_workspace_symbols_search_every_spec_file_of_the_workspace(session, workspace):
    (workspace / "nested").mkdir(exist_ok=True)
    (workspace / "nested" / "deep.rpn").write_text(TRANSFORMER, encoding="utf-8")
    (workspace / ".hidden").mkdir(exist_ok=True)
    (workspace / ".hidden" / "skip.rpn").write_text(TRANSFORMER.replace("encoder", "hidden_enc"), encoding="utf-8")
    found = session.run(session.client.workspace_symbol_async(lsp.WorkspaceSymbolParams("encodr")))
    deep = [s for s in found if s.location.uri == (workspace / "nested" / "deep.rpn").as_uri()]
    (enc,) = [s for s in deep if s.name == "encoder"]  # a fuzzy match: the letters in order
    assert enc.kind == lsp.SymbolKind.Function and enc.location.range.start == at(TRANSFORMER, "\nblock ")
    assert not any("hidden" in s.location.uri for s in found)
    blocks = session.run(session.client.workspace_symbol_async(lsp.WorkspaceSymbolParams("")))
    assert {s.kind for s in blocks} <= {lsp.SymbolKind.Class, lsp.SymbolKind.Function}  # no query: definitions
    assert {"mlp", "transformer", "encoder"} <= {s.name for s in blocks}
    values = session.run(session.client.workspace_symbol_async(lsp.WorkspaceSymbolParams("attn")))
    (attn,) = [s for s in values if s.location.uri.endswith("deep.rpn")]
    assert attn.kind == lsp.SymbolKind.Variable and attn.container_name == "encoder"
