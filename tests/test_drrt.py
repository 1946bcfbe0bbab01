"""``examples/specs/drrt.rpn``: its header states the inferred shapes, and it checks, explains and compiles as a
shipped spec. Its equality with seed 002's equations is ``tests/test_drrt_faithful.py``."""

from __future__ import annotations

from pathlib import Path

import rpn2c
from rpn2c.runtime.cli import main
from tests.test_specs import header_shapes

SPEC = Path(__file__).resolve().parents[1] / "examples" / "specs" / "drrt.rpn"


def test_drrt_header_states_the_inferred_shapes():
    text = SPEC.read_text(encoding="utf-8")
    assert text.startswith("# drrt.rpn - ") and len(text.splitlines()) <= 60
    have = {n.id: str(n.type) for n in rpn2c.check_file(SPEC).nodes()}
    want = header_shapes(text)
    assert want and all(have.get(k) == v for k, v in want.items()), (want, have)


def test_drrt_check_lists_relations_and_their_ties(capsys):
    assert main(["check", str(SPEC)]) == 0
    rows = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.strip()}
    assert "matrix[B, 6, 5]" in rows["ag"] and "relation(xi=low_rank_bilinear(rank=8))" in rows["ag"]
    assert "tied to ag" in rows["bg"] and "swap=True" in rows["bg"]
    assert "tied to ag" in rows["ar"] and "window=1" in rows["ar"] and "tied to tab" in rows["tba"]
