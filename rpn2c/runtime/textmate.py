"""The VS Code TextMate grammar ``editors/vscode/syntaxes/rpn.tmLanguage.json``, generated here so that every
registry name (components, operations, aliases) gets a component scope wherever it is written as a value:
``kappa = identity``, ``post = [relu]``, ``xi_instance = chain(...)``, ``layer_norm(x)``.

Regenerate after adding a component: ``python -m rpn2c.runtime.textmate`` (``tests/test_highlight.py`` fails on a
stale file). Keywords mirror ``grammar/rpn.lark``, as the Pygments lexer's do.
"""

from __future__ import annotations

import json
from pathlib import Path

import rpn2c.components  # noqa: F401  (registers every component)
from rpn2c.components.registry import names
from rpn2c.runtime.highlight import CONSTANTS, DECLARATIONS, KEYWORDS, NAMESPACE

GRAMMAR_PATH = Path(__file__).resolve().parents[2] / "editors" / "vscode" / "syntaxes" / "rpn.tmLanguage.json"
COMPONENT_SCOPE = "support.function.component.rpn"
_NAME = "[A-Za-z_][A-Za-z0-9_]*"
VALUE_KEYWORDS = ("head", "compress", "recurrent", "layer", "repeat")  # what a value is made with
STATEMENT_KEYWORDS = tuple(k for k in KEYWORDS if k not in VALUE_KEYWORDS)  # input, return, ...


def _words(words) -> str:
    return "|".join(sorted(words, key=lambda w: (-len(w), w)))


def grammar() -> dict:
    """The grammar as a dict: rules tried in order at each position (a TextMate engine takes the earliest match,
    ties to the first rule)."""
    order = ["comment", "string", "definition", "head-declaration", "keywords", "numbers", "tensor-type", "setting",
             "component", "call", "operators", "punctuation"]
    repository = {
        "comment": {"name": "comment.line.number-sign.rpn", "match": "#.*$"},
        "string": {"name": "string.quoted.double.rpn", "begin": '"', "end": '"|$',
                   "patterns": [{"name": "constant.character.escape.rpn", "match": "\\\\."}]},
        "definition": {"match": f"\\b({_words(DECLARATIONS)})\\s+({_NAME})",
                       "captures": {"1": {"name": "storage.type.rpn"}, "2": {"name": "entity.name.function.rpn"}}},
        "head-declaration": {"match": f"\\b(head)\\s+({_NAME})(?=\\s*\\{{)",
                             "captures": {"1": {"name": "keyword.other.rpn"}, "2": {"name": "entity.name.tag.rpn"}}},
        "keywords": {"patterns": [
            {"name": "keyword.control.import.rpn", "match": f"\\b({_words(NAMESPACE)})\\b"},
            {"name": "storage.type.rpn", "match": f"\\b({_words(DECLARATIONS)})\\b"},
            {"name": "keyword.control.rpn", "match": f"\\b({_words(STATEMENT_KEYWORDS)})\\b"},
            {"name": "keyword.other.rpn", "match": f"\\b({_words(VALUE_KEYWORDS)})\\b"},
            {"name": "constant.language.rpn", "match": f"\\b({_words(CONSTANTS)})\\b"}]},
        "numbers": {"patterns": [
            {"name": "constant.numeric.float.rpn",
             "match": "\\b[0-9]+\\.[0-9]*([eE][-+]?[0-9]+)?|\\b[0-9]+[eE][-+]?[0-9]+|\\.[0-9]+([eE][-+]?[0-9]+)?"},
            {"name": "constant.numeric.integer.rpn", "match": "\\b[0-9]+\\b"}]},
        "tensor-type": {"match": f"\\b({_NAME})(?=\\s*\\[)", "captures": {"1": {"name": "support.type.rpn"}}},
        "setting": {"match": f"\\b({_NAME})(?=\\s*=)", "captures": {"1": {"name": "variable.parameter.rpn"}}},
        "component": {"comment": "every registry name written as a value (generated from the registry)",
                      "match": f"(?<![A-Za-z0-9_.])({_words(names())})(?![A-Za-z0-9_])(?!\\s*[=.])",
                      "captures": {"1": {"name": COMPONENT_SCOPE}}},
        "call": {"match": f"\\b({_NAME})(?=\\s*\\()", "captures": {"1": {"name": "support.function.rpn"}}},
        "operators": {"name": "keyword.operator.rpn", "match": "//|\\*\\*|[-+*/=%]"},
        "punctuation": {"patterns": [{"name": "punctuation.separator.rpn", "match": "[,;:.]"},
                                     {"name": "punctuation.bracket.rpn", "match": "[(){}\\[\\]]"}]},
    }
    return {"$schema": "https://raw.githubusercontent.com/martinring/tmlanguage/master/tmlanguage.json",
            "name": "RPN 2 spec", "scopeName": "source.rpn", "fileTypes": ["rpn"],
            "patterns": [{"include": f"#{k}"} for k in order], "repository": repository}


def render_grammar() -> str:
    return json.dumps(grammar(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # pragma: no cover
    GRAMMAR_PATH.write_text(render_grammar(), encoding="utf-8")
