"""The language server's worker process (:class:`rpn2c.runtime.lsp_worker.ProcessWorker` starts
``python -m rpn2c.runtime.lsp_child``): a server with no wire answering the heavy requests read from its stdin."""

from __future__ import annotations

import os
import sys

from rpn2c.runtime.lsp import worker_state
from rpn2c.runtime.lsp_wire import read_message, write_message
from rpn2c.runtime.lsp_worker import run


def main() -> int:
    """The child process: answer jobs from stdin until it closes. Whatever a library prints goes to stderr (the
    editor's log), never into the answers on stdout."""
    wire = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    state = worker_state()
    while (message := read_message(sys.stdin.buffer)) is not None:
        write_message(wire, run(state, message))
    return 0


if __name__ == "__main__":
    sys.exit(main())
