"""The language server's wire: JSON-RPC 2.0 messages framed by ``Content-Length`` headers (the LSP base protocol),
and the open documents with their positions in the client's UTF-16 code units.

Plain dictionaries in the LSP's JSON shapes, no protocol library: the server answers its first diagnostics before a
type library for the whole protocol (~0.3 s of imports) could have loaded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlparse

# JSON-RPC error codes (the LSP specification, "Base Protocol")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
SERVER_NOT_INITIALIZED = -32002
REQUEST_CANCELLED, CONTENT_MODIFIED, REQUEST_FAILED = -32800, -32801, -32803  # LSP's own codes

NAME = "rpn2c"  # the server's name in its answers and diagnostics
SEMANTIC_LEGEND = {"tokenTypes": ["keyword", "type", "typeParameter", "class", "function", "parameter", "variable",
                                  "property", "namespace", "string", "number", "comment", "operator"],
                   "tokenModifiers": ["declaration", "defaultLibrary"]}


class ResponseError(Exception):
    """An error answered to a request: ``code`` (JSON-RPC) and message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def read_message(stream: BinaryIO) -> dict | None:
    """The next message on ``stream``, or None at its end. Headers end at an empty line; ``Content-Length`` bytes of
    UTF-8 JSON follow. A body that is not a JSON object raises :class:`ResponseError` (``PARSE_ERROR``)."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            if length is None:
                continue  # stray blank line between messages
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise ResponseError(PARSE_ERROR, f"bad Content-Length header {value.strip()!r}") from None
    body = stream.read(length)
    if len(body) < length:
        return None
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResponseError(PARSE_ERROR, f"message is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ResponseError(INVALID_REQUEST, "a message must be a JSON object")
    return message


def write_message(stream: BinaryIO, message: dict) -> None:
    """Frame and send ``message`` (``jsonrpc`` added)."""
    body = json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    stream.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stream.flush()


# ------------------------------------------------------------------------------------------------ documents
def utf16_units(text: str) -> int:
    """How many UTF-16 code units ``text`` takes (characters beyond U+FFFF take two)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def column_from_units(line: str, units: int) -> int:
    """The character index in ``line`` of the UTF-16 column ``units`` (clamped to the line's end)."""
    seen = 0
    for i, ch in enumerate(line):
        if seen >= units:
            return i
        seen += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


@dataclass
class Document:
    """An open text document: its ``uri``, ``text`` and the client's ``version``."""

    uri: str
    text: str
    version: int | None = None

    @property
    def lines(self) -> list[str]:
        """The text split at ``\n`` (a ``\r`` before it stays on its line), kept until the text changes."""
        cached = self.__dict__.get("_lines")
        if cached is None or cached[0] is not self.text:
            cached = self.__dict__["_lines"] = (self.text, self.text.split("\n"))
        return cached[1]

    def line(self, n: int) -> str:
        lines = self.lines
        return lines[n].rstrip("\r") if 0 <= n < len(lines) else ""

    def position(self, pos: dict) -> tuple[int, int]:
        """``(line, character index)`` of an LSP position (UTF-16 columns)."""
        line = max(int(pos.get("line", 0)), 0)
        return line, column_from_units(self.line(line), max(int(pos.get("character", 0)), 0))

    def client_position(self, line: int, col: int) -> dict:
        """The LSP position of ``(line, character index)``."""
        return {"line": line, "character": utf16_units(self.line(line)[:col])}

    def client_range(self, line: int, col: int, end_line: int, end_col: int) -> dict:
        return {"start": self.client_position(line, col), "end": self.client_position(end_line, end_col)}

    def offset(self, line: int, col: int) -> int:
        """The index in ``text`` of ``(line, character index)``; past the end, the end."""
        lines = self.lines
        if line >= len(lines):
            return len(self.text)
        return sum(len(x) + 1 for x in lines[:line]) + min(col, len(lines[line]))

    def end(self) -> dict:
        """The LSP position just past the last character."""
        lines = self.lines
        return self.client_position(len(lines) - 1, len(lines[-1]))

    def apply(self, change: dict) -> None:
        """A ``TextDocumentContentChangeEvent``: the whole text, or a range replaced."""
        rng = change.get("range")
        if rng is None:
            self.text = change["text"]
            return
        start = self.offset(*self.position(rng["start"]))
        end = self.offset(*self.position(rng["end"]))
        self.text = self.text[:start] + change["text"] + self.text[max(end, start):]


def uri_path(uri: str) -> Path | None:
    """The file a ``file:`` URI names (None for other schemes)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if re.match(r"^/[A-Za-z]:", path):  # file:///C:/... on Windows
        path = path[1:]
    return Path(path)
