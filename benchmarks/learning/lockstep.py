"""The closed loop's pacing: the simulated user talks only while the trainer waits for its next batch.

:class:`LockstepUser` drives conversations over HTTP and pauses once a batch of judged samples is waiting;
:class:`BudgetedQueue` is the trainer's view of the store that ends a wait when the user's conversation
budget is spent; :func:`probe_callback` evaluates each published policy and releases the user again.

Two schedules (``LockstepUser.schedule``):

* ``lockstep`` (reproducible): a run is a function of its seed. Every request carries a seed drawn from the
  run's seed (sampling and the Best-of-N pick), the user judges each turn itself right after each reply (the
  scorer's ``run_until_idle`` in the user's thread: no scorer thread, so a teacher pass never shares the engine
  with a reply being decoded), and the trainer takes its batch only once the user has stopped talking
  (``paused``). Which turns land in which batch is then fixed by the seed, and so is every number computed
  from them (one torch thread, deterministic kernels on CPU).
* ``live``: as a person and a server meet. Unseeded sampling, the background scorer, and the trainer takes
  a batch as soon as one is waiting (the user may be in the middle of a conversation): batches depend on
  thread timing, so two runs of one seed differ.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable

from openclaw_trl.toy import world as toy_world

log = logging.getLogger("learning-bench")

SCHEDULES = ("lockstep", "live")


class LockstepUser:
    """Drives conversations over HTTP while the trainer waits for its next batch, then pauses.

    ``runtime`` needs ``config``, ``store`` and ``scorer``: one user's ``UserRuntime`` (in a run with
    ``users``, with that user's ``api_key``).

    After each conversation every ready turn is judged (``lockstep``: after every reply, in this thread;
    ``live``: it wakes the scorer thread and waits), so the count of waiting samples is exact when it
    decides whether the batch is full. ``paused`` is set when it stops talking (a batch is waiting, or the
    budget is spent) and cleared by the trainer's side (:func:`probe_callback`) before it lets it talk again.
    """

    def __init__(
        self,
        runtime,
        url: str,
        settings,
        seed: int,
        feedback: bool,
        topics: tuple[str, ...],
        api_key: str | None = None,
        schedule: str = "lockstep",
    ):
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        self.schedule = schedule
        self.runtime, self.url, self.settings, self.seed, self.feedback = (
            runtime,
            url,
            settings,
            seed,
            feedback,
        )
        self.api_key = api_key  # the bearer key its requests carry (on a server with users: whose turns)
        self.topics = topics  # what the user asks about (the evaluation also covers topics held out of it)
        self.gate = threading.Event()  # set = the trainer is waiting: talk
        self.paused = threading.Event()  # set = the user stopped talking: the batch (if any) is complete
        self.stop = threading.Event()
        self.exhausted = threading.Event()  # the conversation budget is spent: the trainer must stop
        self.conversations = 0
        self.turns = 0
        self.first_ok: list[bool] = []  # per conversation: was the served first answer what the user wanted
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="lockstep-user", daemon=True)

    def _converse(self) -> list:
        from openclaw_trl.simulation import FeedbackUser, run_conversations, run_feedback_conversations

        lockstep = self.schedule == "lockstep"
        kwargs = dict(
            seed=self.seed * 1_000_003 + self.conversations,
            max_tokens=self.settings.max_tokens,
            model=self.runtime.config.served_model_name,
            should_stop=self.stop.is_set,
            api_key=self.api_key,
            seeded=lockstep,
            after_reply=self.runtime.scorer.run_until_idle if lockstep else None,
        )
        if self.feedback:
            user = FeedbackUser(
                preferred=self.settings.preferred, styles=toy_world.CRITERIA, topics=self.topics
            )
            return run_feedback_conversations(self.url, user, 1, session_prefix="fb", **kwargs)
        user = toy_world.make_user(self.settings.preferred, topics=self.topics)
        return run_conversations(self.url, user, 1, session_prefix="sim", **kwargs)

    def _settle(self) -> None:
        store, scorer = self.runtime.store, self.runtime.scorer
        if self.schedule == "lockstep":
            scorer.run_until_idle()
            return
        deadline = time.monotonic() + 60
        while store.judging.count_ready() > 0 and time.monotonic() < deadline and not self.stop.is_set():
            scorer.wake()
            time.sleep(0.01)

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.gate.wait(0.1):
                    continue
                if self.conversations >= self.settings.max_conversations:
                    self.exhausted.set()
                    self._pause()
                    continue
                for conversation in self._converse():
                    self.conversations += 1
                    self.turns += conversation.turns
                    self.first_ok.append(conversation.first_reply_satisfied)
                self._settle()
                if self.runtime.store.queue.count_waiting() >= self.settings.batch_size:
                    self._pause()
        except BaseException as exc:  # noqa: BLE001 - reported by run_one
            self.error = exc
            log.exception("simulated user failed")

    def _pause(self) -> None:
        self.gate.clear()
        self.paused.set()

    def resume(self) -> None:
        """Let the user talk again (the trainer's side, once the new policy is published and measured)."""
        self.paused.clear()
        self.gate.set()

    def start(self) -> LockstepUser:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.gate.set()
        self.paused.set()
        self.thread.join(timeout=60)


class BudgetExhausted(RuntimeError):
    """The simulated user's conversation budget ran out while the trainer waited for a batch."""


class BudgetedQueue:
    """The trainer's view of the sample queue (``store.queue``): the same samples, but a wait for a batch ends
    (with :class:`BudgetExhausted`) once the user has stopped talking, instead of blocking forever; with a
    ``paused`` event (the ``lockstep`` schedule) a batch is only taken once the user has stopped talking."""

    def __init__(self, queue, exhausted: threading.Event, paused: threading.Event | None = None):
        self._queue, self._exhausted, self._paused = queue, exhausted, paused

    def wait_for_samples(self, n: int, timeout: float | None = None, poll: float = 0.2, **filters):
        while True:
            if self._paused is not None and not self._paused.wait(1.0):
                continue
            try:
                return self._queue.wait_for_samples(n, timeout=1.0, poll=poll, **filters)
            except TimeoutError:
                if self._exhausted.is_set() and self._queue.count_waiting() < n:
                    raise BudgetExhausted(
                        f"conversation budget spent with {n} samples still needed"
                    ) from None

    def __getattr__(self, name):
        return getattr(self._queue, name)


def budgeted_store(store, user: LockstepUser):
    """A view of ``store`` for ``user``'s trainer whose ``queue`` is a :class:`BudgetedQueue` (the other
    repositories and the database are the store's own)."""
    view = copy.copy(store)
    paused = user.paused if user.schedule == "lockstep" else None
    view.queue = BudgetedQueue(store.queue, user.exhausted, paused)
    return view


def probe_callback(user: LockstepUser, result, measure: Callable[[], None]):
    """A trainer callback: ``measure()`` the just-published policy (it appends to ``result``'s curves),
    record the user's counters in ``result`` (a ``run.RunResult``), release the user."""
    from transformers import TrainerCallback

    class Probe(TrainerCallback):
        seen_online = 0

        def _point(self) -> None:
            measure()
            result.conversations.append(user.conversations)
            result.turns.append(user.turns)
            new = user.first_ok[self.seen_online :]
            self.seen_online = len(user.first_ok)
            result.online_first_ok.append(sum(new) / len(new) if new else None)
            log.info(
                "%s p=%g seed %d: update %d rate %.3f (conversations %d)",
                result.row,
                result.noise,
                result.seed,
                len(result.rates) - 1,
                result.rates[-1],
                user.conversations,
            )

        def on_train_begin(self, args, state, control, **kwargs):
            self._point()  # runs after the trainer's own callback published version 0
            user.resume()

        def on_step_end(self, args, state, control, **kwargs):
            self._point()
            user.resume()

    return Probe()
