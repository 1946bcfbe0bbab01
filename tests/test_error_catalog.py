"""The error catalog: every code rpn2c reports is declared once in ``rpn2c.errors.CATALOG`` (title, message
template, help), the docs table is generated from it, and the spec corpus and the tests exercise every code."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

import rpn2c
from rpn2c.errors import CATALOG, CODE_KINDS, render_error_codes_markdown, template_pattern

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "spec_corpus"
CODE = re.compile(rb"\bE0\d{3}\b")
EXPECT = re.compile(rb"^#\s*expect:\s*(E\d{4})", re.M)


def _codes_in(paths) -> dict[str, list[str]]:
    """code -> the files that name it."""
    found: dict[str, list[str]] = {}
    for p in paths:
        for c in set(CODE.findall(p.read_bytes())):
            found.setdefault(c.decode(), []).append(str(p.relative_to(ROOT)))
    return found


@lru_cache(maxsize=1)
def _corpus_diagnostics():
    out = []
    for p in sorted(CORPUS.rglob("*.rpn")):
        if "ok" in p.relative_to(CORPUS).parts:
            continue
        with pytest.raises(rpn2c.SpecError) as info:
            rpn2c.check_file(p)
        out += [(p.name, d) for d in info.value.diagnostics]
    return out


def test_every_code_used_in_the_library_is_declared():
    used = _codes_in((ROOT / "rpn2c").rglob("*.py"))
    assert set(used) - set(CATALOG) == set(), {c: used[c] for c in set(used) - set(CATALOG)}


def test_catalog_entries_are_complete():
    for code, e in CATALOG.items():
        assert e.code == code and re.fullmatch(r"E0[1-6]\d\d", code), code
        assert code[:3] in CODE_KINDS and e.kind == CODE_KINDS[code[:3]]
        assert e.title and e.template and e.help, code
        assert not e.title.endswith(".") and e.title == e.title.strip(), code
    assert len({e.title for e in CATALOG.values()}) == len(CATALOG), "two codes with one title"


def test_docs_table_is_generated_from_the_catalog():
    doc = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert doc == render_error_codes_markdown(), "regenerate docs/errors.md (see its first lines)"
    for code, e in CATALOG.items():
        assert f"| {code} | {e.title} |" in doc


def test_every_corpus_code_is_declared():
    expected = set()
    for p in CORPUS.rglob("*.rpn"):
        expected |= {c.decode() for c in EXPECT.findall(p.read_bytes())}
    assert expected and expected - set(CATALOG) == set()


def test_every_declared_code_is_exercised():
    """By a corpus file (``# expect:``) or by name in a test that makes rpn2c report it."""
    in_corpus = set()
    for p in CORPUS.rglob("*.rpn"):
        in_corpus |= {c.decode() for c in EXPECT.findall(p.read_bytes())}
    in_tests = set(_codes_in(p for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name))
    in_here = {"E0302", "E0315", "E0501", "E0515"}  # the tests below
    assert set(CATALOG) - in_corpus - in_tests - in_here == set()


def test_messages_have_their_templates_shape():
    """Each code the corpus reports has at least one message matching its catalog template."""
    by_code: dict[str, list[str]] = {}
    for _, d in _corpus_diagnostics():
        assert d.code in CATALOG, d
        by_code.setdefault(d.code, []).append(d.message)
    for code, messages in by_code.items():
        pattern = template_pattern(code)
        assert any(pattern.fullmatch(m) for m in messages), (code, CATALOG[code].template, messages[:3])


def test_quick_fix_flags_match_the_suggestions():
    """A code whose diagnostics suggest a name (the editor's quick fix replaces it) is marked ``fix``."""
    suggested = {d.code for _, d in _corpus_diagnostics() if (d.suggestion or "").startswith("did you mean '")}
    assert suggested and all(CATALOG[c].fix for c in suggested), suggested - {c for c in CATALOG if CATALOG[c].fix}


def test_unknown_key_and_keyword_input_are_two_codes():
    """E0302 is a name a component, block or model does not declare; E0315 a keyword input a layer does not take."""
    with pytest.raises(rpn2c.SpecError) as unknown:
        rpn2c.check("model m {\n  input x: vector[B, 4]\n  y = head(x) { kappa = identity(foo = 1) out = 2 }\n"
                    "  return y\n}\n")
    with pytest.raises(rpn2c.SpecError) as keyword:
        rpn2c.check("model m {\n  input x: vector[B, 4]\n  y = head(x, skip = x) { out = 2 }\n  return y\n}\n")
    assert unknown.value.codes == ["E0302"] and keyword.value.codes == ["E0315"]
    assert CATALOG["E0302"].title != CATALOG["E0315"].title


def test_imports_in_text_need_a_file():
    with pytest.raises(rpn2c.SpecGraphError) as info:
        rpn2c.check('import "lib.rpn" as lib\nmodel m {\n  input x: vector[B, 4]\n  return x\n}\n')
    assert info.value.codes == ["E0501"] and info.value.diagnostics[0].span.line == 1


def test_an_imported_file_over_the_size_bound_is_refused(tmp_path):
    big = tmp_path / "big.rpn"
    with open(big, "wb") as fh:  # sparse: nothing is written
        fh.truncate(5 * 2**20)
    main = tmp_path / "main.rpn"
    main.write_text('import "big.rpn" as big\nmodel m {\n  input x: vector[B, 4]\n  return x\n}\n', encoding="utf-8")
    with pytest.raises(rpn2c.SpecGraphError) as info:
        rpn2c.check_file(main)
    assert info.value.codes == ["E0515"] and "5,242,880 bytes" in str(info.value)


def test_reserved_names_cover_what_torch_defines():
    """The lists hold every attribute a compiled model, a block scope and a layer's heads already have (a value of
    that name takes another module name; a head of that name is E0208): a new torch version that adds one fails
    here."""
    import torch.nn as nn

    from rpn2c.ir.names import HEADS_ATTRIBUTES, MODEL_ATTRIBUTES, MODULE_ATTRIBUTES, needs_mangling, reserved
    from rpn2c.lower.build import _Scope

    def ours(o, n):  # torch's or rpn2c's, not a method another library patched onto nn.Module (transformers'
        # smart_apply, once it is imported in the same process)
        where = getattr(getattr(type(o), n, None), "__module__", None) or "torch"
        return where.split(".")[0] in ("torch", "rpn2c", "builtins", "tests")

    def attrs(o):  # dunders, and the markers torch.compile sets on module classes once it has run ("___...")
        return {n for n in set(dir(o)) | set(vars(o)) if not (n.startswith("__") and n.endswith("__"))
                and not n.startswith("___") and ours(o, n)}

    model = rpn2c.compile("model m {\n  input x: vector[B, 4]\n  y = head(x) { out = 2 }\n  return y\n}\n")
    assert attrs(_Scope()) | attrs(nn.Module()) <= MODULE_ATTRIBUTES
    assert attrs(model) - {"y"} <= MODULE_ATTRIBUTES | MODEL_ATTRIBUTES
    assert attrs(nn.ModuleDict()) <= MODULE_ATTRIBUTES | HEADS_ATTRIBUTES
    assert not needs_mangling("keys") and reserved("keys", "head") and needs_mangling("graph")
    assert needs_mangling("class") and needs_mangling("__dict__") and reserved("h1", "head") is None
    assert reserved("class", "head") and reserved("self", "input") and reserved("class", "input") is None
