"""A Pygments lexer for `.rpn` specs, registered as the ``rpn`` lexer (``pygmentize -l rpn``, Sphinx, Jupyter).

Keywords and operators mirror ``grammar/rpn.lark`` (``tests/test_highlight.py`` derives the grammar's terminals
and fails on one left out); component and operation names come from the registry, tensor types from the IR.
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Whitespace

import rpn2c.components  # noqa: F401  (registers every component)
from rpn2c.components.registry import names
from rpn2c.ir.types import TYPE_CONSTRUCTORS

NAMESPACE = ("import", "as")
DECLARATIONS = ("model", "block")
KEYWORDS = ("head", "compress", "recurrent", "layer", "repeat", "input", "param", "return")
CONSTANTS = ("true", "false", "none")
OPERATORS = ("//", "**", "+", "-", "*", "/", "%", "=")
PUNCTUATION = "(){}[],:;."

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_END = r"(?![A-Za-z0-9_])"
_FLOAT = r"[0-9]+\.[0-9]*([eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|\.[0-9]+([eE][-+]?[0-9]+)?"


class RpnLexer(RegexLexer):
    """RPN 2 model specs (rpn2c)."""

    name = "RPN 2 spec"
    aliases = ["rpn", "rpn2"]
    filenames = ["*.rpn"]
    mimetypes = ["text/x-rpn"]

    tokens = {
        "root": [
            (r"[ \t\f\r\n]+", Whitespace),
            (r"#[^\n]*", Comment.Single),
            (r'"([^"\\\n]|\\.)*"', String.Double),
            (rf"(model|block)([ \t\f\r\n]+)({_NAME})", bygroups(Keyword.Declaration, Whitespace, Name.Function)),
            (rf"(head)([ \t\f\r\n]+)({_NAME})(?=[ \t\f\r\n]*\{{)", bygroups(Keyword, Whitespace, Name.Label)),
            (words(NAMESPACE, suffix=_END), Keyword.Namespace),
            (words(DECLARATIONS, suffix=_END), Keyword.Declaration),
            (words(CONSTANTS, suffix=_END), Keyword.Constant),
            (words(KEYWORDS, suffix=_END), Keyword),
            (_FLOAT, Number.Float),
            (r"[0-9]+", Number.Integer),
            (words(tuple(TYPE_CONSTRUCTORS), suffix=_END + r"(?=[ \t\f\r\n]*\[)"), Keyword.Type),
            (_NAME + r"(?=[ \t\f\r\n]*=)", Name.Attribute),
            (words(tuple(names()), suffix=_END), Name.Builtin),
            (_NAME, Name),
            (words(OPERATORS), Operator),
            (words(tuple(PUNCTUATION)), Punctuation),
        ],
    }
