"""``LearningControl``: pause learning and roll back to an earlier adapter version, between two updates.

The HTTP routes and the UI run in server threads, the trainer in its own loop; they meet here.

* ``set_paused(True)`` is stored (``store.versions.set_learning_paused``), so a restarted run stays paused. The trainer
  reads it before it takes each batch and waits while it is set: serving, judging and collecting go on, samples
  keep queueing, no update runs. An update already running when the pause arrives finishes.
* ``rollback(version)`` checks the version against the history (recorded, not the one serving, its checkpoint
  complete with optimizer and scheduler state), queues one request and waits up to ``timeout_s`` for the
  trainer to carry it out at its next point between updates (while it waits for samples, while paused, or
  before it takes a batch: never inside an update). A request the trainer has not picked up by then is
  withdrawn, and nothing changed.
* ``versions()`` is the history ``GET /v1/adapters`` lists: the last ``adapter_history`` recorded versions up
  to the one serving, each with whether its checkpoint can still be restored.

Errors say what the caller can do: :class:`UnknownVersion`, :class:`NotRestorable`,
:class:`LearningUnavailable` (no trainer, no history, or another rollback running) and :class:`RollbackTimeout`.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from openclaw_trl.resume import is_restorable

logger = logging.getLogger(__name__)

ROLLBACK_TIMEOUT_S = 300.0
"""How long ``rollback`` waits for the trainer to reach a point between updates (one update's length at most)."""


class LearningUnavailable(RuntimeError):
    """This server cannot do it now: no trainer runs, ``adapter_history`` is 0, or a rollback is under way."""


class UnknownVersion(LookupError):
    """No such version in the history."""


class NotRestorable(ValueError):
    """The version is known but cannot be restored (its checkpoint is gone, or it is the one serving)."""


class RollbackTimeout(TimeoutError):
    """The trainer did not reach a point between updates in time; the request was withdrawn."""


@dataclass
class VersionInfo:
    """One entry of ``GET /v1/adapters``."""

    version: int  # the policy version (= the global step that published it)
    step: int
    created: float  # Unix time its checkpoint was written
    samples: int  # samples its update consumed
    metrics: dict = field(default_factory=dict)
    restored_from: int | None = None  # a rollback: the version it published again
    restorable: bool = False  # its checkpoint is complete (adapter, optimizer, scheduler, RNG, step)
    serving: bool = False  # the engine serves it now


@dataclass
class RollbackResult:
    """What a rollback did."""

    policy_version: int  # the new policy version, serving the restored weights
    restored_from: int
    samples_rolled_back: int  # samples of the undone updates, marked (kept, never trained on again)
    samples_waiting: int  # judged samples still queued for the next update


@dataclass
class _Request:
    version: int
    done: threading.Event = field(default_factory=threading.Event)
    taken: bool = False
    result: RollbackResult | None = None
    error: BaseException | None = None


class LearningControl:
    """Pause and rollback requests from the server threads to the trainer (see the module docstring).

    ``store`` persists the pause and holds the history, ``output_dir`` the ``checkpoint-<version>`` folders,
    ``history`` is ``adapter_history`` and ``engine`` tells which version serves.
    """

    def __init__(self, store, output_dir: str | Path, history: int, engine=None, poll_s: float = 0.25):
        self.store, self.output_dir, self.history, self.engine = store, Path(output_dir), history, engine
        self.poll_s = poll_s
        self.stopping = False
        self._cond = threading.Condition()
        self._pending: _Request | None = None
        self._trainer_running = False
        self._trainer_state = "stopped"  # stopped / waiting for samples / paused / updating / rolling back

    # -- the server's side ---------------------------------------------------------------------------

    @property
    def trainer_state(self) -> str:
        """What the trainer is doing: stopped, waiting for samples, paused, updating or rolling back."""
        with self._cond:
            return self._trainer_state

    @property
    def paused(self) -> bool:
        return self.store.versions.learning_paused()

    def set_paused(self, paused: bool) -> None:
        changed = paused != self.paused
        self.store.versions.set_learning_paused(paused)
        with self._cond:
            self._cond.notify_all()
        if changed:
            logger.info(
                "learning paused: serving and collecting go on, no update until it is resumed"
                if paused
                else "learning resumed"
            )

    @property
    def serving_version(self) -> int:
        return int(getattr(self.engine, "policy_version", 0))

    def checkpoint(self, version: int) -> Path:
        return self.output_dir / f"checkpoint-{int(version)}"

    def versions(self) -> list[VersionInfo]:
        """The last ``history`` recorded versions up to the one serving, newest first."""
        if self.history <= 0:
            return []
        serving = self.serving_version
        return [
            VersionInfo(
                version=v.version,
                step=v.version,
                created=v.created,
                samples=v.samples,
                metrics=v.metrics,
                restored_from=v.restored_from,
                restorable=is_restorable(self.checkpoint(v.version)),
                serving=v.version == serving,
            )
            for v in self.store.versions.adapter_versions(up_to=serving, limit=self.history)
        ]

    def rollback(self, version: int, timeout_s: float = ROLLBACK_TIMEOUT_S) -> RollbackResult:
        """Have the trainer restore ``version`` at its next point between updates; wait for the result."""
        self._check_rollback(version)
        request = _Request(int(version))
        with self._cond:
            if self._pending is not None:
                raise LearningUnavailable(
                    f"a rollback to version {self._pending.version} is under way: try again when it is done"
                )
            self._pending = request
            self._cond.notify_all()
        if not request.done.wait(timeout_s):
            with self._cond:
                if not request.taken:
                    self._pending = None
                    raise RollbackTimeout(
                        f"the trainer did not reach a point between updates within {timeout_s:g} s (an update "
                        "is running): nothing was changed, try again"
                    )
            request.done.wait()  # taken: the restore itself is short
        if request.error is not None:
            raise request.error
        return request.result

    def _check_rollback(self, version: int) -> None:
        if self.history <= 0:
            raise LearningUnavailable(
                "this run keeps no adapter history (adapter_history: 0): set adapter_history > 0 to roll back"
            )
        if not self._trainer_running:
            raise LearningUnavailable("no trainer is running on this server: there is nothing to roll back")
        known = {v.version: v for v in self.versions()}
        if version not in known:
            listed = ", ".join(str(v) for v in sorted(known)) or "none yet"
            raise UnknownVersion(f"no adapter version {version} in the history (versions: {listed})")
        if known[version].serving:
            raise NotRestorable(f"version {version} is the one serving: there is nothing to roll back")
        if not known[version].restorable:
            raise NotRestorable(
                f"version {version} cannot be restored: {self.checkpoint(version)} is gone or incomplete"
            )

    # -- the trainer's side ----------------------------------------------------------------------------

    @contextmanager
    def trainer_running(self):
        """Around the trainer's loop: rollbacks are accepted only inside it; a request left over fails."""
        with self._cond:
            self._trainer_running = True
            self._trainer_state = "updating"
        try:
            yield self
        finally:
            with self._cond:
                self._trainer_running = False
                self._trainer_state = "stopped"
                request, self._pending = self._pending, None
            if request is not None and not request.done.is_set():
                request.error = LearningUnavailable("training ended before the rollback was carried out")
                request.done.set()

    def next_rollback(self) -> int | None:
        """The version of a waiting rollback request, now taken by the trainer (it must call ``finish``)."""
        with self._cond:
            request = self._pending
            if request is None or request.taken:
                return None
            request.taken = True
            self._trainer_state = "rolling back"
            return request.version

    def note_state(self, state: str) -> None:
        """The trainer says what it is doing now (``trainer_state``)."""
        with self._cond:
            self._trainer_state = state

    def stop(self) -> None:
        """The run is ending: a trainer waiting while paused goes on (to find that no batch will come)."""
        with self._cond:
            self.stopping = True
            self._cond.notify_all()

    def wait_while_paused(self) -> int | None:
        """Block while learning is paused; return a rollback request's version as soon as one arrives (to
        carry out now), or None once learning may go on."""
        while True:
            version = self.next_rollback()
            if version is not None or not self.paused or self.stopping:
                return version
            with self._cond:
                self._trainer_state = "paused"
                self._cond.wait(self.poll_s)

    def finish(self, result: RollbackResult | None = None, error: BaseException | None = None) -> None:
        """The trainer carried out (or failed) the request ``next_rollback`` gave it."""
        with self._cond:
            request, self._pending = self._pending, None
        if request is not None:
            request.result, request.error = result, error
            request.done.set()
