"""The worker plumbing both engines share (``openclaw_trl.engines.worker``): priorities, grouping, close."""

from __future__ import annotations

import threading

import pytest

from openclaw_trl.engines.worker import EngineWorker, Job, Pending


def test_pending_serves_before_learning_and_groups_by_key():
    pending = Pending()
    learn = Job("gen", ["b", "p"], size=2, priority="learn")
    serve = Job("gen", ["p", "b", "p"], size=3)
    pending.add(learn)
    pending.add(serve)
    assert pending.first() == "serve" and len(pending) == 5
    same = pending.take("serve", 10, key=lambda job, i: job.payload[i])
    assert same == [(serve, 0), (serve, 2)]  # the first row's key; the other row keeps its place
    assert pending.take("serve", 10) == [(serve, 1)]
    assert pending.first() == "learn"
    assert pending.take("learn", 1) == [(learn, 0)]
    assert pending.take("learn", 1) == [(learn, 1)] and pending.first() is None


def test_pending_skips_rows_of_failed_jobs_and_fails_all():
    pending = Pending()
    failed, waiting = Job("gen", [1, 2], size=2), Job("gen", [3], size=1, priority="learn")
    pending.add(failed)
    pending.add(waiting)
    failed.fail(RuntimeError("first row failed"))
    assert pending.take("serve", 10) == []
    assert pending.fail_all(RuntimeError("closed")) == [waiting]
    assert waiting.done.is_set() and "closed" in str(waiting.error) and len(pending) == 0


def test_job_results_stream_and_failures():
    seen = []
    job = Job("gen", [0, 1], size=2, on_token=lambda i, t: seen.append((i, t)))
    job.stream(1, 7)
    job.finish_one(1, "b")
    assert not job.done.is_set()
    job.finish_one(0, "a")
    assert job.done.is_set() and job.results == ["a", "b"] and seen == [(1, 7)]
    broken = Job("gen", [0], on_token=lambda i, t: 1 / 0)
    broken.stream(0, 1)  # logged, not raised
    assert not broken.done.is_set()


def test_worker_submit_close_and_dead_thread():
    worker = EngineWorker("TestEngine")
    ran = threading.Event()

    def loop():
        while (job := worker.next_job()) is not None:
            if job.kind == "boom":
                job.fail(ValueError("bad job"))
                continue
            job.finish_one(0, job.payload * 2)
            ran.set()

    worker.start(loop)
    assert worker.submit(Job("double", 21)).results == [42] and ran.is_set()
    with pytest.raises(RuntimeError, match="TestEngine call failed.*bad job"):
        worker.submit(Job("boom", None))
    worker.close(join_timeout_s=5)
    with pytest.raises(RuntimeError, match="TestEngine is closed"):
        worker.submit(Job("double", 1))

    gone = EngineWorker("GoneEngine")
    gone.start(lambda: None)  # the thread ends without reading its queue
    with pytest.raises(RuntimeError, match="GoneEngine worker stopped"):
        gone.submit(Job("double", 1))
