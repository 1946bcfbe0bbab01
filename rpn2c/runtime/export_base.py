"""What every export format shares: the error a failed export raises, and the context that keeps torch.export's and
torch.onnx's chatter out of the command's output (:mod:`rpn2c.runtime.export_write` drives the formats,
:mod:`rpn2c.runtime.export_onnx` is ONNX's own steps)."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings


INSTALL = "pip install 'rpn2c[export]'"  # what --format onnx needs


class ExportError(Exception):
    """A model that cannot be exported (the message says where and why)."""


@contextlib.contextmanager
def quiet():
    """torch.export / torch.onnx warnings and progress lines stay out of the command's output."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._export", "torch.export", "torch.fx")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
