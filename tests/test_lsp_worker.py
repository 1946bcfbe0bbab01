"""The language server's heavy-request queue (:mod:`rpn2c.runtime.lsp_worker`): one job at a time on the worker,
cancellation, supersession by a newer edit, a worker that dies, and the worker process's own loop."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rpn2c.runtime import lsp_worker
from rpn2c.runtime.lsp_wire import Document, read_message, write_message
from rpn2c.runtime.lsp_worker import Done, Job, Jobs

ROOT = Path(__file__).resolve().parents[1]
CANCELLED, MODIFIED, INTERNAL, INVALID = -32800, -32801, -32603, -32600


class FakeWorker:
    """Records the jobs it was given; the test answers them through ``Jobs.finished``."""

    made: list[FakeWorker] = []

    def __init__(self, number, deliver):
        self.number, self.started, self.closed = number, [], False
        FakeWorker.made.append(self)

    def start(self, message):
        self.started.append(message)

    def close(self, busy=False):
        self.closed = "busy" if busy else True


@pytest.fixture
def jobs(monkeypatch):
    FakeWorker.made = []
    monkeypatch.setattr(lsp_worker, "ProcessWorker", FakeWorker)
    answers: list[dict] = []
    out = Jobs(answers.append, lambda done: None)
    out.answers = answers
    return out


def submit(jobs: Jobs, ident, uri="file:///a.rpn") -> Job:
    job = Job(ident, "codeLens/resolve", {"data": {"uri": uri}}, uri, Document(uri, "text", 1))
    jobs.submit(job)
    return job


def answer(jobs: Jobs, result="ok"):
    worker = FakeWorker.made[-1]
    jobs.finished(Done(worker.number, worker.started[-1]["id"], {"id": worker.started[-1]["id"], "result": result}))


def test_jobs_run_one_at_a_time_in_order_with_their_documents(jobs):
    submit(jobs, 1)
    submit(jobs, 2, "file:///b.rpn")
    (worker,) = FakeWorker.made
    assert [m["params"] for m in worker.started] == [{"data": {"uri": "file:///a.rpn"}}]
    assert worker.started[0]["documents"] == {"file:///a.rpn": ["text", 1]}
    answer(jobs, "first")
    assert jobs.answers == [{"id": 1, "result": "first"}] and len(worker.started) == 2
    answer(jobs, "second")
    assert jobs.answers[1] == {"id": 2, "result": "second"} and jobs.running is None


def test_cancel_answers_at_once_and_a_cancelled_jobs_late_answer_goes_nowhere(jobs):
    submit(jobs, 1)
    submit(jobs, 2)
    jobs.cancel(2)  # queued: never runs
    jobs.cancel(1)  # running: answered now, the worker's answer dropped
    jobs.cancel(1)  # twice: still one answer
    assert [(a["id"], a["error"]["code"]) for a in jobs.answers] == [(2, CANCELLED), (1, CANCELLED)]
    submit(jobs, 3)
    answer(jobs, "late")  # job 1's answer
    worker = FakeWorker.made[-1]
    assert [m["id"] for m in worker.started] == [1, 3] and len(jobs.answers) == 2
    answer(jobs, "third")
    assert jobs.answers[-1] == {"id": 3, "result": "third"}


def test_a_newer_edit_supersedes_only_the_queued_jobs_of_its_document(jobs):
    submit(jobs, 1)
    submit(jobs, 2)
    submit(jobs, 3, "file:///b.rpn")
    jobs.supersede("file:///a.rpn")
    assert jobs.answers == [{"id": 2, "error": {"code": MODIFIED, "message": (
        "the document changed before this request ran")}}]
    answer(jobs, "asked on the old text")  # the running job finishes on its snapshot
    answer(jobs, "b")
    assert [a.get("result") for a in jobs.answers[1:]] == ["asked on the old text", "b"]


def test_a_worker_that_stops_fails_its_job_and_the_next_job_starts_a_new_worker(jobs):
    submit(jobs, 1)
    submit(jobs, 2)
    first = FakeWorker.made[0]
    jobs.finished(Done(first.number, None))
    assert jobs.answers[0]["id"] == 1 and jobs.answers[0]["error"]["code"] == INTERNAL
    assert "worker stopped" in jobs.answers[0]["error"]["message"]
    second = FakeWorker.made[-1]
    assert second is not first and [m["params"] for m in second.started] == [{"data": {"uri": "file:///a.rpn"}}]
    jobs.finished(Done(first.number, None))  # a late word from the old worker changes nothing
    answer(jobs, "two")
    assert jobs.answers[-1] == {"id": 2, "result": "two"}


def test_shutdown_answers_every_pending_job_and_stops_the_worker(jobs):
    submit(jobs, 1)
    submit(jobs, 2)
    jobs.close("the server is shutting down")
    assert sorted((a["id"], a["error"]["code"]) for a in jobs.answers) == [(1, INVALID), (2, INVALID)]
    assert FakeWorker.made[0].closed == "busy" and jobs.worker is None  # ended at once: nobody awaits its job


OPS = st.lists(st.one_of(st.tuples(st.just("submit"), st.sampled_from(["a", "b"])),
                         st.tuples(st.just("cancel"), st.integers(0, 12)),
                         st.tuples(st.just("supersede"), st.sampled_from(["a", "b"])),
                         st.tuples(st.just("answer"), st.none()),
                         st.tuples(st.just("crash"), st.none())), max_size=40)


@given(OPS)
def test_every_request_is_answered_exactly_once_and_the_worker_holds_at_most_one_job(ops):
    FakeWorker.made = []
    answers: list[dict] = []
    original = lsp_worker.ProcessWorker
    lsp_worker.ProcessWorker = FakeWorker
    try:
        jobs = Jobs(answers.append, lambda done: None)
        submitted: list[int] = []
        for op, arg in ops:
            if op == "submit":
                submitted.append(len(submitted))
                submit(jobs, submitted[-1], f"file:///{arg}.rpn")
            elif op == "cancel":
                jobs.cancel(arg)
            elif op == "supersede":
                jobs.supersede(f"file:///{arg}.rpn")
            elif jobs.running is not None:
                worker = FakeWorker.made[-1]
                key = worker.started[-1]["id"]
                jobs.finished(Done(worker.number, key, {"id": key, "result": key}) if op == "answer"
                              else Done(worker.number, None))
            ids = [a["id"] for a in answers]
            assert len(ids) == len(set(ids))  # never answered twice
            pending = [i for i in submitted if i not in ids]
            # every unanswered request is running or queued, in the order it came
            live = [j.ident for j in ([jobs.running] if jobs.running and not jobs.running.dropped else [])]
            assert live + [j.ident for j in jobs.waiting] == pending
            assert jobs.running is not None or not jobs.waiting  # the worker is never idle while jobs wait
        jobs.close("done")
        assert sorted(a["id"] for a in answers) == submitted
    finally:
        lsp_worker.ProcessWorker = original


# ------------------------------------------------------------------------------------------------ the process
def test_the_worker_process_answers_jobs_and_keeps_its_stdout_for_answers(tmp_path):
    """``python -m rpn2c.runtime.lsp_child``: a code lens resolved from the document the job carries (not the
    file on disk), an unknown method refused, and a print from library code kept out of the answers."""
    spec = ROOT / "specs" / "transformer.rpn"
    text = spec.read_text(encoding="utf-8")
    uri = (tmp_path / "t.rpn").as_uri()  # no such file: the job's snapshot is the text
    line = next(i for i, ln in enumerate(text.splitlines()) if ln.startswith("  attn = head"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    noisy = ("import runpy, rpn2c.runtime.analysis as a\n"  # the kernels' lookup prints, as a library might
             "kernels = a.value_kernels\n"
             "a.value_kernels = lambda *args: print('noise from a library') or kernels(*args)\n"
             "runpy.run_module('rpn2c.runtime.lsp_child', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", noisy],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    lens = {"range": {}, "data": {"uri": uri, "line": line, "col": 2, "version": 1}}
    write_message(proc.stdin, {"id": 1, "method": "codeLens/resolve", "params": lens,
                               "documents": {uri: [text, 1]}})
    write_message(proc.stdin, {"id": 2, "method": "textDocument/nope", "params": {}, "documents": {}})
    proc.stdin.close()
    first, second = read_message(proc.stdout), read_message(proc.stdout)
    assert read_message(proc.stdout) is None and proc.wait(timeout=60) == 0
    assert first["id"] == 1 and first["result"]["command"]["arguments"] == [uri, line, 2]
    assert "explain · generated code" in first["result"]["command"]["title"]
    assert second["id"] == 2 and second["error"]["code"] == INVALID
    assert b"noise from a library" in proc.stderr.read()


def test_a_process_worker_that_exits_is_reported(tmp_path):
    delivered: queue.Queue = queue.Queue()
    worker = lsp_worker.ProcessWorker(7, delivered.put, [sys.executable, "-c", "import sys; sys.exit(3)"])
    done = delivered.get(timeout=60)
    assert (done.worker, done.key, done.message) == (7, None, None) and worker.proc.returncode == 3
