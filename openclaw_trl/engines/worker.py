"""The worker plumbing both engines share: jobs, a queue drained by one owner thread, priorities, close.

Data flow: a caller thread builds a ``Job`` (its requests, one result slot per request, an event) and
``EngineWorker.submit`` puts it on the queue and blocks on the event. The engine's own thread takes jobs off
the queue, keeps their rows in ``Pending`` (``serve`` rows ahead of ``learn`` rows, the rule of
``base.Priority``), fills the result slots and sets the event when the last one is filled. A failure of any
row fails the whole job: the caller gets a ``RuntimeError`` that names the cause. A caller that gives up
(``submit``'s ``timeout_s``) cancels its job: the job is failed with a ``TimeoutError``, and the engine drops its
rows that have not started and stops the ones in progress at their next step, so abandoned work never keeps
the engine busy. ``close`` puts a ``None`` sentinel on the queue, joins the thread and fails the jobs still
queued, so no caller waits forever.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openclaw_trl.engines.base import Priority

logger = logging.getLogger(__name__)

WAIT_SLICE_S = 1.0
"""How often a waiting caller checks that the worker thread is still alive."""


@dataclass
class Job:
    """One caller waiting for results: ``size`` result slots, filled by the worker, then ``done`` is set.

    ``kind`` says what the engine does with ``payload`` (e.g. ``"gen"`` with a list of requests); ``value`` is
    the result of a control call that has no rows.
    """

    kind: str
    payload: Any
    size: int = 1
    on_token: Callable[[int, int], Any] | None = None
    priority: Priority = "serve"
    results: list = field(default_factory=list)
    remaining: int = 0
    value: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.results = [None] * self.size
        self.remaining = self.size

    def finish_one(self, index: int | None = None, result: Any = None) -> None:
        """Fill result slot ``index`` (when given); the job is done once every slot is filled."""
        if index is not None:
            self.results[index] = result
        self.remaining -= 1
        if self.remaining <= 0:
            self.done.set()

    def fail(self, exc: BaseException) -> None:
        """End the job with ``exc`` (the caller raises it); a job that is already done keeps its outcome."""
        if self.done.is_set():
            return
        self.error = exc
        self.done.set()

    @property
    def cancelled(self) -> bool:
        """Whether the job ended before its work did (failed, or its caller gave up): stop working on it."""
        return self.error is not None

    def stream(self, index: int, token: int) -> None:
        """Call ``on_token(index, token)``; a callback that raises is logged and never stops the engine."""
        if self.on_token is None:
            return
        try:
            self.on_token(index, token)
        except Exception:  # noqa: BLE001 - a broken stream consumer must not kill the engine
            logger.exception("on_token callback failed")


class Pending:
    """Rows ``(job, index)`` that wait for the engine, one queue per priority: ``serve`` rows go first."""

    def __init__(self) -> None:
        self.rows: dict[str, deque] = {"serve": deque(), "learn": deque()}

    def add(self, job: Job) -> None:
        self.rows[job.priority].extend((job, i) for i in range(job.size))

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.rows.values())

    def first(self) -> Priority | None:
        """The priority whose rows go next (``serve`` while any wait), ``None`` when nothing waits."""
        return "serve" if self.rows["serve"] else ("learn" if self.rows["learn"] else None)

    def take(self, priority: Priority, limit: int, key: Callable | None = None) -> list[tuple[Job, int]]:
        """Up to ``limit`` rows of ``priority`` in arrival order, skipping rows of jobs already failed.

        ``key(job, index)``: take only rows with the same key as the first one (the others keep their place).
        """
        rows, taken, rest = self.rows[priority], [], deque()
        wanted = None
        while rows:
            job, index = item = rows.popleft()
            if job.done.is_set():
                continue
            if key is not None and wanted is None:
                wanted = key(job, index)
            same = key is None or key(job, index) == wanted
            (taken if same and len(taken) < limit else rest).append(item)
            if key is None and len(taken) >= limit:
                break
        rest.extend(rows)
        self.rows[priority] = rest
        return taken

    def fail_all(self, exc: BaseException) -> list[Job]:
        """Fail the job of every waiting row and forget the rows; returns those jobs."""
        jobs = {id(job): job for rows in self.rows.values() for job, _ in rows}
        for rows in self.rows.values():
            rows.clear()
        for job in jobs.values():
            job.fail(exc)
        return list(jobs.values())


class EngineWorker:
    """The engine's owner thread and its job queue.

    ``start(loop)`` runs ``loop`` on the thread; the loop reads jobs with ``next_job`` and returns once it reads
    ``None`` (close), after failing the work it holds. ``name`` (e.g. ``"HFEngine"``) appears in the thread
    name and in the error messages.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self, loop: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=loop, name=f"{self.name}-worker", daemon=True)
        self._thread.start()

    def next_job(self, timeout: float | None = None) -> Job | None | bool:
        """The next job, ``None`` for close, or ``False`` when none came within ``timeout`` seconds
        (``None``: wait for one; ``0``: do not wait)."""
        try:
            if timeout is not None and timeout <= 0:
                return self._queue.get_nowait()
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return False

    def submit(self, job: Job, timeout_s: float | None = None) -> Job:
        """Queue ``job`` and wait until it is done.

        ``timeout_s``: give up after that many seconds: the job is cancelled (see the module docstring) and
        ``TimeoutError`` raised. ``RuntimeError`` when the job failed or the worker is gone.
        """
        if self.closed:
            raise RuntimeError(f"{self.name} is closed")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s!r}")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._queue.put(job)
        while not job.done.wait(
            WAIT_SLICE_S if deadline is None else max(0.0, min(WAIT_SLICE_S, deadline - time.monotonic()))
        ):
            if not self._thread.is_alive():
                job.fail(RuntimeError(f"{self.name} worker stopped"))
            elif deadline is not None and time.monotonic() >= deadline:
                job.fail(TimeoutError(f"{self.name}: no result within {timeout_s} s; the work was cancelled"))
        if isinstance(job.error, TimeoutError):
            raise TimeoutError(str(job.error))
        if job.error is not None:
            raise RuntimeError(f"{self.name} call failed: {job.error!r}") from job.error
        return job

    def close(self, join_timeout_s: float) -> None:
        """Stop the thread (the loop fails its own work on ``None``) and fail the jobs still queued."""
        if self.closed:
            return
        self.closed = True
        self._queue.put(None)
        self._thread.join(timeout=join_timeout_s)
        while (job := self.next_job(0)) is not False:
            if job is not None:
                job.fail(RuntimeError(f"{self.name} closed"))
