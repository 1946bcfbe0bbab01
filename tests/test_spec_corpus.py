"""The bad-spec corpus: every file in tests/spec_corpus/ declares the exact diagnostics the checker must report.

Header lines of a corpus file:
    # expect: E0xxx L:C              a diagnostic in this file (in order of position)
    # expect: E0xxx sub/f.rpn:L:C    a diagnostic located in another (imported) file, by path suffix
    # expect-message: text           a substring of the rendered error (message, hint or note)
Files under ok/ must check, compile and run a forward pass.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import rpn2c
from rpn2c.errors import CODE_KINDS

CORPUS = Path(__file__).parent / "spec_corpus"
BAD = sorted(p for p in CORPUS.rglob("*.rpn") if "ok" not in p.relative_to(CORPUS).parts)
GOOD = sorted((CORPUS / "ok").glob("*.rpn"))

EXPECT = re.compile(r"^#\s*expect:\s*(E\d{4})\s+(?:(\S+):)?(\d+):(\d+)\s*$")
MESSAGE = re.compile(r"^#\s*expect-message:\s*(.+?)\s*$")
CLASSES = {"syntax": rpn2c.SpecSyntaxError, "name": rpn2c.SpecNameError, "type": rpn2c.SpecTypeError,
           "shape": rpn2c.SpecShapeError, "graph": rpn2c.SpecGraphError,
           "resource": rpn2c.SpecResourceError}


def _header(path: Path):
    expected, messages = [], []
    for line in _text(path).splitlines():
        if not line.startswith("#"):
            break
        if m := EXPECT.match(line):
            expected.append((m[1], m[2], int(m[3]), int(m[4])))
        elif m := MESSAGE.match(line):
            messages.append(m[1])
    return expected, messages


def _text(path: Path) -> str:
    """A corpus file as the checker shows it (a file with a stray non-UTF-8 byte reads with U+FFFD there)."""
    return path.read_bytes().decode("utf-8", errors="replace")


def _id(p: Path) -> str:
    return str(p.relative_to(CORPUS))


def test_corpus_is_complete():
    """Every category is covered and every bad file declares at least one expectation."""
    assert len(BAD) >= 36 and len(GOOD) >= 5
    prefixes = {p.stem.split("_")[0] for p in BAD if p.parent == CORPUS}
    assert {"syntax", "name", "hp", "shape", "graph", "multi"} <= prefixes
    for p in BAD:
        assert _header(p)[0], f"{p} has no `# expect:` line"


@pytest.mark.parametrize("path", BAD, ids=_id)
def test_bad_spec(path: Path):
    expected, messages = _header(path)
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check_file(path)
    err = info.value
    own = str(path)
    got = []
    for d in err.diagnostics:
        where = None if d.span.file == own else d.span.file
        got.append((d.code, where, d.span.line, d.span.col))
    want = []
    for code, where, line, col in expected:
        match = next((g for g in got if g[1] is not None and where is not None and g[1].endswith(where)), None)
        want.append((code, match[1] if match else where, line, col))
    assert got == want, err.render()
    # one mistake, one diagnostic: no two diagnostics share a location
    assert len({(d.span.file, d.span.line, d.span.col) for d in err.diagnostics}) == len(err.diagnostics)
    # the class is the kind of the first diagnostic, and every code is in a known range
    first = err.diagnostics[0]
    assert type(err) is CLASSES[CODE_KINDS[first.code[:3]]]
    assert all(d.code[:3] in CODE_KINDS for d in err.diagnostics)
    text = str(err)
    lines = text.splitlines()
    for d in err.diagnostics:
        head = f"{d.span.file}:{d.span.line}:{d.span.col}: error[{d.code}]: {d.message}"
        assert head in lines, text
        i = lines.index(head)
        # the source line, read from disk for this file, then a caret starting under the reported column
        source = (_text(path) if d.span.file == own else err.sources[d.span.file]).splitlines()
        gutter, shown = lines[i + 1].split("| ", 1)
        assert shown == source[d.span.line - 1].rstrip(), text
        caret = lines[i + 2]
        assert set(caret.strip()) == {"^"}, text
        assert caret.index("^") == len(gutter) + 2 + d.span.col - 1, text
    for m in messages:
        assert m in text, f"expected {m!r} in:\n{text}"
    for d in err.diagnostics:
        if d.suggestion:
            assert f"help: {d.suggestion}" in text


def _random_input(t, dims: dict[str, int]) -> torch.Tensor:
    shape = [dims.get(d, 5) if isinstance(d, str) else d for d in (t.shape if t.batched else t.shape[1:])]
    if t.kind == "edges":
        return torch.randint(0, dims["N"], shape, dtype=torch.int64)
    return torch.randn(shape, dtype=torch.float64)


@pytest.mark.parametrize("path", GOOD, ids=_id)
def test_good_spec(path: Path):
    graph = rpn2c.check_file(path)
    assert graph.outputs and all(graph.node(o).type is not None for o in graph.outputs)
    torch.manual_seed(0)
    model = rpn2c.compile_file(path).double()
    dims = {"B": 3, "T": 4, "S": 6, "N": 5, "E": 12}
    inputs = [_random_input(graph.node(i).type, dims) for i in graph.inputs]
    y = model(*inputs)
    outs = y if isinstance(y, tuple) else (y,)
    for o, value in zip(graph.outputs, outs):
        t = graph.node(o).type
        shape = t.shape if t.batched else t.shape[1:]
        assert value.shape == tuple(dims.get(d, 5) if isinstance(d, str) else d for d in shape)
        assert value.dtype == torch.float64 and torch.isfinite(value).all()
