"""Syntax highlighting follows the grammar: the Pygments lexer and the VS Code TextMate grammar cover every
terminal of ``grammar/rpn.lark`` (derived from the grammar, so a new keyword without colours fails here), the lexer
cuts every shipped spec into exactly the grammar's tokens, and the VS Code extension registers both."""

from __future__ import annotations

import json
import re
from pathlib import Path

import lark
import pytest
from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from pygments.token import Comment, Error, Keyword, Name, Number, Operator, Punctuation, String

from rpn2c.runtime import textmate
from rpn2c.runtime.cli import build_parser
from rpn2c.runtime.highlight import RpnLexer
from rpn2c.syntax.parser import grammar_text, parse

ROOT = Path(__file__).resolve().parents[1]
VSCODE = ROOT / "editors" / "vscode"
SPECS = sorted([*(ROOT / "specs").rglob("*.rpn"), *(ROOT / "examples" / "specs").rglob("*.rpn")])
GRAMMAR = lark.Lark(grammar_text(), parser="lalr", lexer="basic")
# a sample text and the token class each regex terminal must get; a new regex terminal needs an entry here
REGEX_SAMPLES = {"NAME": ("hidden_2", Name), "INT": ("42", Number.Integer), "FLOAT": ("1.5e-3", Number.Float),
                 "STRING": ('"a \\"b\\""', String), "COMMENT": ("# a note", Comment)}


def _terminals():
    """(name, text, is_keyword) of every string terminal; regex terminals by name."""
    strings, regexes = [], []
    for t in GRAMMAR.terminals:
        if t.name in GRAMMAR.ignore_tokens and t.name != "COMMENT":
            continue  # whitespace
        if t.pattern.type == "str":
            strings.append((t.name, t.pattern.value, re.fullmatch(r"[a-z]+", t.pattern.value) is not None))
        else:
            regexes.append(t.name)
    return strings, regexes


STRINGS, REGEXES = _terminals()
KEYWORDS = sorted(text for _, text, kw in STRINGS if kw)
SYMBOLS = sorted(text for _, text, kw in STRINGS if not kw)


def _lex(text: str):
    return [(tok, value) for tok, value in RpnLexer().get_tokens(text) if value.strip()]


def test_the_grammar_yields_what_the_tests_expect():
    assert {"model", "block", "import", "head", "return", "true"} <= set(KEYWORDS)
    assert {"//", "{", "=", "."} <= set(SYMBOLS)
    assert set(REGEXES) == set(REGEX_SAMPLES), "a new regex terminal needs a sample in REGEX_SAMPLES"


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_the_lexer_colours_every_keyword_of_the_grammar(keyword):
    ((tok, value),) = _lex(keyword)
    assert value == keyword and tok in Keyword
    ((tok, _),) = _lex(keyword + "s_2")  # a longer name is not the keyword
    assert tok not in Keyword


def test_the_lexer_colours_every_symbol_and_regex_terminal_of_the_grammar():
    for symbol in SYMBOLS:
        ((tok, value),) = _lex(symbol)
        assert value == symbol and (tok in Operator or tok in Punctuation), symbol
    for name, (sample, expected) in REGEX_SAMPLES.items():
        ((tok, value),) = _lex(sample)
        assert value == sample and tok in expected, name
        assert [t.type for t in GRAMMAR.lex(sample, dont_ignore=True)] == [name]  # the sample is that terminal


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_lexer_cuts_every_shipped_spec_into_the_grammars_tokens(spec):
    text = spec.read_text(encoding="utf-8")
    tokens = list(RpnLexer().get_tokens(text))
    assert "".join(v for _, v in tokens) == text + ("" if text.endswith("\n") else "\n")
    assert not [v for t, v in tokens if t in Error]
    ours = [v for t, v in tokens if v.strip() and t not in Comment]
    assert ours == [str(t) for t in GRAMMAR.lex(text)]


def test_the_lexer_is_found_by_name_and_file_name_through_its_entry_point():
    assert isinstance(get_lexer_by_name("rpn"), RpnLexer)
    assert isinstance(get_lexer_for_filename("specs/cnn.rpn"), RpnLexer)


def test_the_lexer_marks_components_types_definitions_and_settings():
    text = "block enc(d = 4) {\n  input x: sequence[B, T, d]\n  y = head(x) { kappa = chebyshev(d = 2) }\n}\n"
    kinds = dict((v, t) for t, v in _lex(text))
    assert kinds["enc"] in Name.Function and kinds["sequence"] in Keyword.Type
    assert kinds["chebyshev"] in Name.Builtin and kinds["kappa"] in Name.Attribute and kinds["x"] in Name


# ------------------------------------------------------------------------------------------------ TextMate
def _tm_rules(grammar: dict) -> list[dict]:
    """The top-level rules in the order a TextMate engine tries them, includes resolved."""
    out = []

    def add(pattern):
        if "include" in pattern:
            add(grammar["repository"][pattern["include"].lstrip("#")])
        elif "patterns" in pattern and "match" not in pattern and "begin" not in pattern:
            for p in pattern["patterns"]:
                add(p)
        else:
            out.append(pattern)

    for p in grammar["patterns"]:
        add(p)
    return out


def _tm_scope(rules: list[dict], text: str, word: str) -> str | None:
    """The scope the first rule matching at the start of ``text`` gives to its first ``len(word)`` characters."""
    for rule in rules:
        m = re.match(rule.get("match") or rule["begin"], text)
        if m is None:
            continue
        if "name" in rule:
            return rule["name"]
        for group, capture in rule.get("captures", {}).items():
            if m.span(int(group)) == (0, len(word)):
                return capture["name"]
        return None
    return None


@pytest.fixture(scope="module")
def tm() -> dict:
    return json.loads((VSCODE / "syntaxes" / "rpn.tmLanguage.json").read_text(encoding="utf-8"))


def _scopes(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "name" and isinstance(v, str):
                yield v
            else:
                yield from _scopes(v)
    elif isinstance(node, list):
        for v in node:
            yield from _scopes(v)


def test_the_textmate_grammar_is_valid_and_scoped_to_rpn(tm):
    assert tm["scopeName"] == "source.rpn"
    scopes = list(_scopes({k: v for k, v in tm.items() if k != "name"}))
    assert scopes and all(s.endswith(".rpn") for s in scopes)
    for rule in _tm_rules(tm):
        re.compile(rule.get("match") or rule["begin"])  # the patterns stay within what Python's re reads


def test_the_textmate_grammar_colours_every_terminal_of_the_grammar(tm):
    rules = _tm_rules(tm)
    for keyword in KEYWORDS:
        scope = _tm_scope(rules, keyword + " x", keyword)
        assert scope and scope.split(".")[0] in ("keyword", "storage", "constant"), keyword
        longer = _tm_scope(rules, keyword + "s_2 ", keyword + "s_2")
        assert longer is None or not longer.startswith(("keyword", "storage", "constant.language")), keyword
    for symbol in SYMBOLS:
        scope = _tm_scope(rules, symbol, symbol)
        assert scope and scope.startswith(("keyword.operator", "punctuation")), symbol
    expected = {"STRING": "string", "COMMENT": "comment", "INT": "constant.numeric", "FLOAT": "constant.numeric"}
    for name, prefix in expected.items():
        sample = REGEX_SAMPLES[name][0]
        assert (_tm_scope(rules, sample, sample) or "").startswith(prefix), name


def test_the_vscode_extension_registers_the_language_grammar_and_server(tm):
    package = json.loads((VSCODE / "package.json").read_text(encoding="utf-8"))
    (language,) = package["contributes"]["languages"]
    assert language["extensions"] == [".rpn"] and (VSCODE / language["configuration"]).is_file()
    json.loads((VSCODE / language["configuration"]).read_text(encoding="utf-8"))
    (grammar,) = package["contributes"]["grammars"]
    assert grammar["language"] == language["id"] and grammar["scopeName"] == tm["scopeName"]
    assert (VSCODE / grammar["path"]).resolve() == (VSCODE / "syntaxes" / "rpn.tmLanguage.json").resolve()
    props = package["contributes"]["configuration"]["properties"]
    command = [props["rpn2c.server.command"]["default"], *props["rpn2c.server.args"]["default"]]
    assert command == ["rpn2c", "lsp"]
    assert build_parser().parse_args(command[1:]).fn.__name__ == "cmd_lsp"  # a real sub-command
    assert "vscode-languageclient" in package["dependencies"]
    main = (VSCODE / package["main"]).read_text(encoding="utf-8")
    assert "vscode-languageclient" in main and "server.command" in main and f'"{language["id"]}"' in main


# ------------------------------------------------------------------------------------------------ component scopes
def _tm_line(rules: list[dict], line: str) -> list[str | None]:
    """The scope of each character of ``line`` as a TextMate engine gives it: at each position the rule matching
    earliest wins (ties: the first rule); a begin/end rule runs to its end."""
    scopes: list[str | None] = [None] * len(line)
    pos = 0
    while pos < len(line):
        best = None
        for rule in rules:
            m = re.compile(rule.get("match") or rule["begin"]).search(line, pos)
            if m and m.end() > m.start() and (best is None or m.start() < best[1].start()):
                best = (rule, m)
        if best is None:
            break
        rule, m = best
        end = m.end()
        if "begin" in rule:
            close = re.compile(rule["end"]).search(line, end)
            end = close.end() if close else len(line)
        if "name" in rule:
            scopes[m.start():end] = [rule["name"]] * (end - m.start())
        for group, capture in rule.get("captures", {}).items():
            a, b = m.span(int(group))
            scopes[a:b] = [capture["name"]] * (b - a)
        pos = end
    return scopes


def _component_uses(program) -> list:
    """The names written where a component goes: a slot's value (``kappa = identity``, ``post = [relu]``,
    ``xi_instance = chain(...)``) and every registry name called as an operation."""
    from rpn2c.components.registry import SLOT_FAMILIES, names
    from rpn2c.syntax import ast

    known, out = set(names()), []

    def expr(e, slot: bool) -> None:
        if isinstance(e, ast.Name) and slot and e.text in known:
            out.append(e)
        elif isinstance(e, ast.Call):
            if e.func.text in known:
                out.append(e.func)
            for a in (*e.args, *(k.value for k in e.kwargs)):
                expr(a, False)
        elif isinstance(e, ast.ListExpr):
            for item in e.items:
                expr(item, slot)

    for d in program.definitions:
        for stmt in d.body:
            v = getattr(stmt, "value", None)
            for s in (*getattr(v, "settings", ()), *(s for h in getattr(v, "heads", ()) for s in h.settings)):
                expr(s.value, s.key in SLOT_FAMILIES)
            for a in getattr(v, "args", ()):
                expr(a, False)
            if v is not None and not hasattr(v, "settings"):
                expr(v.call if hasattr(v, "count") else v, False)
    return out


def test_the_textmate_grammar_file_is_generated_from_the_registry(tm):
    """Adding a component without regenerating the grammar (python -m rpn2c.runtime.textmate) fails here."""
    assert (VSCODE / "syntaxes" / "rpn.tmLanguage.json").read_text(encoding="utf-8") == textmate.render_grammar()
    from rpn2c.components.registry import names

    rule = tm["repository"]["component"]["match"]
    assert all(re.fullmatch(rule, n) for n in names()) and not re.fullmatch(rule, "relux")


def test_every_component_use_in_the_shipped_specs_gets_the_component_scope(tm):
    rules = _tm_rules(tm)
    total = 0
    for spec in SPECS:
        text = spec.read_text(encoding="utf-8")
        lines = text.splitlines()
        for name in _component_uses(parse(text, str(spec))):
            scope = _tm_line(rules, lines[name.span.line - 1])[name.span.col - 1]
            assert scope == textmate.COMPONENT_SCOPE, (spec.name, name.span.line, name.text, scope)
            total += 1
    assert total > 200  # the corpus has them (214 when this was written)


@pytest.mark.parametrize("line,word,scope", [
    ("    kappa = identity", "identity", textmate.COMPONENT_SCOPE),
    ("    post = [layer_norm, relu]", "relu", textmate.COMPONENT_SCOPE),
    ("  y = layer_norm(add(a, b))", "add", textmate.COMPONENT_SCOPE),
    ("    relu = 2", "relu", "variable.parameter.rpn"),  # a key, not a component
    ("  y = lib.relu(x)", "relu", "support.function.rpn"),  # a block of an import
    ("model gat {", "gat", "entity.name.function.rpn"),
    ("  y = relux(x)", "relux", "support.function.rpn"),
    ("    kappa = identityx", "identityx", None),
])
def test_component_scopes_only_where_a_component_is_written(tm, line, word, scope):
    at = line.index(word)
    assert _tm_line(_tm_rules(tm), line)[at] == scope
