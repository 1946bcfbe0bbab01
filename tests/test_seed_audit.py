"""docs/seed_audit.md cannot rot: every test it names exists, every path it names exists, the statuses are the
documented ones, the counts at the top are the table's, and every deliberate deviation names a section of
docs/semantics.md."""

from __future__ import annotations

import collections
import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AUDIT = ROOT / "docs" / "seed_audit.md"
STATUSES = ("equal", "untested", "deviates", "approximated", "pending", "missing")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
PATH_REF = re.compile(r"`((?:rpn2c|specs|examples|tests)/[\w/.*-]+)`")


def _rows():
    rows = []
    for line in AUDIT.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            assert len(cells) == 6, line
            rows.append(dict(zip(("n", "item", "reference", "implementation", "tests", "status"), cells)))
    return rows


ROWS = _rows()


def _status(row) -> str:
    return row["status"].split(":")[0].strip()


def test_the_table_has_the_70_items_numbered_in_order():
    assert [int(r["n"]) for r in ROWS] == list(range(1, 71))
    assert len({r["item"] for r in ROWS}) == 70


def test_statuses_are_the_documented_ones_and_the_counts_at_the_top_are_the_tables():
    counts = collections.Counter(_status(r) for r in ROWS)
    assert set(counts) <= set(STATUSES), counts
    text = AUDIT.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("Count by status:"))
    stated = {name: int(n) for name, n in re.findall(r"(\w+) (\d+)", line)}
    assert stated == {s: counts.get(s, 0) for s in STATUSES}, (stated, counts)
    assert f"({len(ROWS)} items)" in line


def _test_functions(path: Path) -> set:
    return set(re.findall(r"^(?:    )?def (test_\w+)\(", path.read_text(encoding="utf-8"), re.M))


@pytest.mark.parametrize("row", ROWS, ids=[r["n"] for r in ROWS])
def test_every_named_test_exists(row):
    refs = TEST_REF.findall(row["tests"])
    status = _status(row)
    if status in ("equal", "deviates", "approximated"):
        assert refs, f"item {row['n']} ({status}) names no test"
    leftover = TEST_REF.sub("", row["tests"]).replace(";", "").strip()
    assert not leftover, f"item {row['n']}: unparsed test text {leftover!r}"
    for file, name in refs:
        path = ROOT / file
        assert path.is_file(), f"item {row['n']}: no file {file}"
        assert name in _test_functions(path), f"item {row['n']}: no test {name} in {file}"


@pytest.mark.parametrize("row", ROWS, ids=[r["n"] for r in ROWS])
def test_every_named_path_exists(row):
    for ref in PATH_REF.findall(row["implementation"]):
        assert glob.glob(str(ROOT / ref)), f"item {row['n']}: no path {ref}"


def test_every_deviation_names_a_section_of_the_semantics_page():
    headings = {h.strip() for h in re.findall(r"^## (.+)$", (ROOT / "docs" / "semantics.md").read_text(
        encoding="utf-8"), re.M)}
    deviating = [r for r in ROWS if _status(r) == "deviates"]
    for row in deviating:
        sections = re.findall(r"docs/semantics\.md `## ([^`]+)`", row["status"])
        assert sections, f"item {row['n']} deviates without naming a docs/semantics.md section"
        assert set(sections) <= headings, (row["n"], sections)


def test_approximated_and_missing_items_say_why():
    for row in ROWS:
        if _status(row) in ("approximated", "pending", "missing"):
            assert len(row["status"].split(":", 1)[-1].strip()) > 10, f"item {row['n']} gives no reason"
