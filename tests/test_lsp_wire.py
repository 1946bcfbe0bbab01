"""The language server's wire: Content-Length framing, UTF-16 positions, and edits applied to open documents."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rpn2c.runtime.lsp_wire import (PARSE_ERROR, Document, ResponseError, column_from_units, read_message,
                                    utf16_units, write_message)

TEXT = st.lists(st.sampled_from(["a", "b", " ", "\n", "é", "\U0001d705", "\r\n", "="]), max_size=30).map("".join)


def test_messages_round_trip_through_the_framing_and_the_end_of_input_is_none():
    stream = io.BytesIO()
    sent = [{"id": 1, "method": "initialize", "params": {"x": "\U0001d705"}}, {"method": "exit"}]
    for m in sent:
        write_message(stream, m)
    stream.seek(0)
    assert [read_message(stream), read_message(stream), read_message(stream)] == [
        {"jsonrpc": "2.0", **sent[0]}, {"jsonrpc": "2.0", **sent[1]}, None]


@pytest.mark.parametrize("raw", [b"Content-Length: 3\r\n\r\n{x}", b"Content-Length: x\r\n\r\n"])
def test_a_body_that_is_not_json_or_a_bad_length_is_a_parse_error(raw):
    with pytest.raises(ResponseError) as err:
        read_message(io.BytesIO(raw))
    assert err.value.code == PARSE_ERROR


def test_a_truncated_body_ends_the_input():
    assert read_message(io.BytesIO(b"Content-Length: 10\r\n\r\n{}")) is None


@given(TEXT)
def test_utf16_columns_and_character_indices_are_inverse(line):
    line = line.replace("\n", "").replace("\r", "")
    for i in range(len(line) + 1):
        units = utf16_units(line[:i])
        assert units == len(line[:i].encode("utf-16-le")) // 2
        assert column_from_units(line, units) == i


@given(TEXT, TEXT, st.integers(0, 60), st.integers(0, 60))
def test_an_incremental_edit_equals_the_string_replacement(text, new, a, b):
    """A range given in UTF-16 positions replaces exactly the characters between its ends."""
    doc = Document("file:///x.rpn", text)
    a, b = sorted((min(a, len(text)), min(b, len(text))))
    if "\r\n" in text[a - 1:a + 1] or "\r\n" in text[b - 1:b + 1]:
        return  # a position inside a CRLF pair has no LSP position
    def pos(offset):
        before = text[:offset]
        line = before.count("\n")
        return {"line": line, "character": utf16_units(before[before.rfind("\n") + 1:])}
    doc.apply({"range": {"start": pos(a), "end": pos(b)}, "text": new})
    assert doc.text == text[:a] + new + text[b:]


def test_whole_document_changes_and_the_end_position():
    doc = Document("file:///x.rpn", "old")
    doc.apply({"text": "a\n\U0001d705b"})
    assert doc.text == "a\n\U0001d705b" and doc.end() == {"line": 1, "character": 3}
    assert doc.position({"line": 1, "character": 2}) == (1, 1)  # after the astral character's two units
