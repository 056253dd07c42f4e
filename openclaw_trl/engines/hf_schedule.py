"""The HF engine's owner thread: what it runs next (``hf`` module docstring, "Concurrency model").

Serving first: every waiting ``serve`` batch runs to its end before learning moves; ``learn`` work (judge votes,
teacher scoring) advances one bounded piece at a time in between, and gets one piece between two serve batches
once it has waited ``learn_max_wait_s``. Generation rows that arrive within ``batch_wait_s`` decode together (up
to ``max_batch_size``); a scoring job runs on its own and never waits for the window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from openclaw_trl.engines.base import Priority
from openclaw_trl.engines.worker import Job

logger = logging.getLogger(__name__)


@dataclass
class _Task:
    """Work in progress on the owner thread: ``steps`` runs one piece per ``next()``; ``jobs`` fail with it."""

    steps: Iterator
    jobs: list[Job]


def _batch_key(job: Job, index: int):
    """Rows decoded together share their weights (``policy`` of one adapter, or ``base``); a scoring job is a
    batch of its own."""
    if job.kind != "gen":
        return ("score", id(job))
    request = job.payload[index]
    return ("gen", request.weights, request.adapter if request.weights == "policy" else None)


def _mixed_batch_key(job: Job, index: int):
    """Generation rows are decoded together whatever their weights; a scoring job is a batch of its own."""
    return ("gen",) if job.kind == "gen" else ("score", id(job))


class OwnerSchedule:
    """A mixin of ``HFEngine``: its owner thread's loop (``_worker_loop``) over the engine's queue (``_worker``),
    its pending rows (``_pending``: a ``worker.Pending``) and its settings (``batch_wait_s``, ``max_batch_size``,
    ``learn_max_wait_s``, ``mix_adapters``); the engine provides the pieces of work (``_decode_steps``,
    ``_score_steps``) and the model (``model.mixable``)."""

    def _worker_loop(self) -> None:
        """Serve first; advance the learning task one piece at a time in between (module docstring)."""
        learning: _Task | None = None
        while not self._closing:
            starting = learning is None and not self._pending.rows["serve"]
            if not self._collect(
                block=starting and not len(self._pending), wait_s=self.batch_wait_s if starting else 0
            ):
                break
            if self._pending.rows["serve"] and not self._learning_overdue(learning):
                task = self._next_task("serve")
                while task is not None and self._advance(task):
                    pass
                continue
            learning = learning or self._next_task("learn")
            if learning is not None and not self._advance(learning):
                learning = None
            self._learn_clock = None  # learning just moved (or nothing waits): its wait starts again
        if learning is not None:
            self._abandon(learning, RuntimeError("HFEngine closed"))

    def _learning_overdue(self, learning: _Task | None) -> bool:
        """Whether learning work (a task under way or ``learn`` rows waiting) has waited ``learn_max_wait_s``
        behind serving: it then gets the next piece."""
        if learning is None and not self._pending.rows["learn"]:
            self._learn_clock = None
            return False
        now = time.monotonic()
        if self._learn_clock is None:
            self._learn_clock = now
        return now - self._learn_clock >= self.learn_max_wait_s

    def _collect(self, block: bool, wait_s: float) -> bool:
        """Take in queued jobs (waiting for one when ``block``), then more for up to ``wait_s`` while less than a
        batch of generation rows is pending (scoring jobs alone do not wait: each runs on its own); False once
        the engine closes."""
        if block and not self._admit(self._worker.next_job()):
            return False
        deadline = time.monotonic() + wait_s
        while True:
            short = len(self._pending) < self.max_batch_size and self._pending_generation()
            job = self._worker.next_job(deadline - time.monotonic() if short else 0)
            if job is False:
                return True
            if not self._admit(job):
                return False

    def _pending_generation(self) -> bool:
        """Whether a generation row waits (only those are batched together, so only they wait for more)."""
        return any(job.kind == "gen" for rows in self._pending.rows.values() for job, _ in rows)

    def _admit(self, job: Job | None) -> bool:
        """Queue the rows of ``job`` by priority; ``None`` (close) fails every pending row and returns False."""
        if job is None:
            self._closing = True
            self._pending.fail_all(RuntimeError("HFEngine closed"))
            return False
        self._pending.add(job)
        return True

    def _next_task(self, priority: Priority) -> _Task | None:
        """The next batch of ``priority``: the first pending row's weights, up to ``max_batch_size`` rows, or
        the first pending scoring job; None when nothing (alive) waits."""
        key = _mixed_batch_key if self._mixing else _batch_key
        batch = self._pending.take(priority, self.max_batch_size, key=key)
        if not batch:
            return None
        job = batch[0][0]
        if job.kind == "score":
            return _Task(self._score_steps(job), [job])
        return _Task(self._decode_steps(batch, priority), list({id(j): j for j, _ in batch}.values()))

    @property
    def _mixing(self) -> bool:
        return self.mix_adapters and self.model.mixable

    def _advance(self, task: _Task) -> bool:
        """Run one piece of ``task``; False once it is finished (or failed: its jobs then get the error)."""
        try:
            next(task.steps)
            return True
        except StopIteration:
            return False
        except BaseException as exc:  # noqa: BLE001 - the callers must see it, the engine must live on
            logger.exception("engine work failed")
            for job in task.jobs:
                job.fail(exc)
            return False

    @staticmethod
    def _abandon(task: _Task, exc: BaseException) -> None:
        for job in task.jobs:
            job.fail(exc)
        task.steps.close()  # runs its ``finally``: the weights it pinned are released
