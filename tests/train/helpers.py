"""Paths and an in-process CLI runner shared by the training tests."""

from __future__ import annotations

from pathlib import Path

from rpn2c.runtime.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).resolve().parent / "specs"
IRIS = SPECS / "iris_mlp.rpn"
IRIS_EPOCHS = 6


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """``rpn2c ARGV`` in-process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err
