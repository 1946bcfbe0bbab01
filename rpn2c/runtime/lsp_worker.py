"""Heavy requests off the language server's reading loop: ``rpn2c.viewOutput`` (which imports torch and builds the
model) and code lens resolution (which runs the optimiser) go to a worker, one job at a time, while the loop keeps
checking documents and answering the light requests.

The worker is a child process (``python -m rpn2c.runtime.lsp_child``, started at the first heavy request): torch's
import in a thread of the server would hold the interpreter lock for most of its seconds and stall every diagnostic
(``benchmarks/lsp_latency.py --worker thread`` measures it), so a thread is only the fallback the client may ask for
(``initializationOptions.worker = "thread"``).

Each job carries a snapshot of its document. A client's ``$/cancelRequest`` answers a queued or running job at once
with RequestCancelled: a queued job never runs, a running one's answer is dropped. A newer edit of the document
answers the jobs still queued for its older text with ContentModified; a job already running finishes on the text it
was asked about (the user's command answers what the user clicked). A worker that dies answers its job with an
internal error, and the next job starts a new one.
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from rpn2c.runtime.lsp_wire import (CONTENT_MODIFIED, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
                                    REQUEST_CANCELLED, Document, ResponseError, read_message, write_message)

VIEW_OUTPUT = "rpn2c.viewOutput"
HEAVY = frozenset({"workspace/executeCommand", "codeLens/resolve"})
KINDS = ("process", "thread")


def target_uri(method: str, params: dict) -> str:
    """The document a heavy request reads; a request the worker could not run is refused here, at once."""
    if method == "workspace/executeCommand":
        if params.get("command") != VIEW_OUTPUT:
            raise ResponseError(INVALID_PARAMS, f"unknown command {params.get('command')!r}")
        args = params.get("arguments") or []
        if len(args) != 3 or not isinstance(args[0], str) or not all(isinstance(a, int) for a in args[1:]):
            raise ResponseError(INVALID_PARAMS, f"{VIEW_OUTPUT} takes [uri, line, character], got {list(args)}")
        return args[0]
    data = params.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("uri"), str):
        raise ResponseError(INVALID_PARAMS, "a code lens to resolve carries data {uri, line, col, version}")
    return data["uri"]


@dataclass
class Job:
    """A heavy request: the client's ``ident``, the document's ``uri`` and its text and version when asked."""

    ident: object
    method: str
    params: dict
    uri: str
    document: Document | None
    key: int = 0  # the job's number on the worker
    dropped: bool = False  # answered already (cancelled): the worker's answer goes nowhere

    def message(self) -> dict:
        docs = {} if self.document is None else {self.uri: [self.document.text, self.document.version]}
        return {"id": self.key, "method": self.method, "params": self.params, "documents": docs}


@dataclass
class Done:
    """What a worker sent: an answer to job ``key``, or None for ``message`` when worker ``worker`` stopped."""

    worker: int
    key: int | None
    message: dict | None = field(default=None)


class Jobs:
    """The heavy requests of one server: a queue, the running job and the worker. Called on the server's loop only;
    the worker's answers come back through ``deliver`` (the loop's inbox) as :class:`Done`."""

    def __init__(self, answer, deliver, kind: str = "process", make_state=None):
        self.answer, self.deliver, self.kind = answer, deliver, kind
        self.make_state = make_state  # a thread worker's own server (``rpn2c.runtime.lsp.worker_state``)
        self.waiting: list[Job] = []
        self.running: Job | None = None
        self.worker = None
        self.keys = itertools.count(1)
        self.workers = itertools.count(1)

    def submit(self, job: Job) -> None:
        job.key = next(self.keys)
        self.waiting.append(job)
        self._next()

    def cancel(self, ident) -> None:
        """``$/cancelRequest``: answer the job with RequestCancelled (nothing if it was answered already)."""
        for job in [*self.waiting, *([self.running] if self.running else [])]:
            if job.ident == ident and not job.dropped:
                self._drop(job, REQUEST_CANCELLED, "request cancelled")

    def supersede(self, uri: str) -> None:
        """A newer text of ``uri``: the jobs still waiting on its older text are answered ContentModified."""
        for job in [j for j in self.waiting if j.uri == uri]:
            self._drop(job, CONTENT_MODIFIED, "the document changed before this request ran")

    def finished(self, done: Done) -> None:
        """A worker's answer or its end."""
        if self.worker is None or done.worker != self.worker.number:
            return  # a worker already replaced
        job = self.running
        if done.key is None:
            self.worker = None
            if job is not None and not job.dropped:
                self.answer({"id": job.ident, "error": {"code": INTERNAL_ERROR, "message": (
                    f"the rpn2c worker stopped while answering {job.method}")}})
        elif job is None or done.key != job.key:
            return
        elif not job.dropped:
            self.answer({"id": job.ident, **{k: v for k, v in done.message.items() if k in ("result", "error")}})
        self.running = None
        self._next()

    def close(self, reason: str | None = None) -> None:
        """Stop the worker; with a ``reason``, answer every job not answered yet."""
        if reason:
            for job in [*self.waiting, *([self.running] if self.running else [])]:
                if not job.dropped:
                    self._drop(job, INVALID_REQUEST, reason)
        busy, self.waiting, self.running = self.running is not None, [], None
        if self.worker is not None:
            self.worker.close(busy)
            self.worker = None

    def _drop(self, job: Job, code: int, message: str) -> None:
        job.dropped = True
        if job in self.waiting:
            self.waiting.remove(job)
        self.answer({"id": job.ident, "error": {"code": code, "message": message}})

    def _next(self) -> None:
        if self.running is not None or not self.waiting:
            return
        job = self.running = self.waiting.pop(0)
        if self.worker is None:
            number = next(self.workers)
            self.worker = (ProcessWorker(number, self.deliver) if self.kind == "process"
                           else ThreadWorker(number, self.deliver, self.make_state))
        try:
            self.worker.start(job.message())
        except OSError as exc:  # the worker could not start or its pipe closed: this job fails, the next retries
            self.worker = None
            self.running = None
            job.dropped = True
            self.answer({"id": job.ident, "error": {"code": INTERNAL_ERROR,
                                                    "message": f"the rpn2c worker could not start: {exc}"}})
            self._next()


# ------------------------------------------------------------------------------------------------ workers
def _package_path() -> str:
    """``PYTHONPATH`` for the child: the directory holding this ``rpn2c`` first, so it runs the same code."""
    root = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH")
    return os.pathsep.join([root, rest]) if rest else root


class ProcessWorker:
    """A child ``python -m rpn2c.runtime.lsp_child``: jobs on its stdin, answers read by a thread."""

    def __init__(self, number: int, deliver, argv: list[str] | None = None):
        self.number, self.deliver = number, deliver
        import subprocess  # here: the server's start needs none of it

        argv = argv or [sys.executable, "-m", "rpn2c.runtime.lsp_child"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={**os.environ, "PYTHONPATH": _package_path()})
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message = read_message(self.proc.stdout)
            except ResponseError:
                continue
            if message is None:
                self.proc.wait()
                self.deliver(Done(self.number, None))
                return
            self.deliver(Done(self.number, message.get("id"), message))

    def start(self, message: dict) -> None:
        write_message(self.proc.stdin, message)

    def close(self, busy: bool = False) -> None:
        """End the worker: at the end of its input when idle, at once when it is busy on a job nobody awaits."""
        import subprocess

        try:
            self.proc.stdin.close()
            if not busy:
                self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.proc.kill()


class ThreadWorker:
    """The same jobs on a thread of the server (shares its interpreter lock: see the module's note)."""

    def __init__(self, number: int, deliver, make_state):
        self.number, self.deliver, self.make_state = number, deliver, make_state
        self.jobs: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        state = self.make_state()
        while (message := self.jobs.get()) is not None:
            self.deliver(Done(self.number, message["id"], run(state, message)))

    def start(self, message: dict) -> None:
        self.jobs.put(message)

    def close(self, busy: bool = False) -> None:
        self.jobs.put(None)  # a thread cannot be stopped: it ends after its job


# ------------------------------------------------------------------------------------------------ the worker's side
def run(state, message: dict) -> dict:
    """Answer one job on ``state`` (a worker's server, ``rpn2c.runtime.lsp.worker_state``) with the documents it
    carries."""
    state.docs = {uri: Document(uri, text, version) for uri, (text, version) in message.get("documents", {}).items()}
    try:
        handler = state.feature(message["method"])
        if handler is None:
            raise ResponseError(INVALID_REQUEST, f"the worker does not answer {message['method']}")
        return {"id": message["id"], "result": handler(message.get("params") or {})}
    except ResponseError as exc:
        return {"id": message["id"], "error": {"code": exc.code, "message": str(exc)}}
    except Exception as exc:  # a bug in a feature answers its request, the worker stays up
        return {"id": message["id"], "error": {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}: {exc}"}}
