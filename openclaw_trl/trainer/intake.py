"""Between two updates, on the main process: wait for the next batch of judged samples, a rollback request or a stop.

``next_event`` returns a batch once ``wanted`` samples wait in the store and learning is not paused, or the
version of a rollback request as soon as one arrives (``LearningControl``). While it waits it tells the
control its ``trainer_state`` (``waiting for samples``, ``updating`` once a batch is taken). With
``max_staleness`` the store drops the too-stale samples as it hands a batch out (kept, with the reason),
always those sampled at another temperature than the trainer's (``temperature``: one temperature per sample),
and with ``max_waiting`` the oldest of a queue longer than that (the trainer cannot keep up).
Each sample's ``staleness`` is set along the lineage (updates between its policy version and the trainer's).
"""

from __future__ import annotations

from dataclasses import dataclass

from openclaw_trl.records import TrainingSample


@dataclass(frozen=True)
class NextEvent:
    """A batch to train on (``samples``, and how many samples were dropped as stale while it was taken), or
    a rollback request (``rollback``: the version to restore)."""

    samples: list[TrainingSample] | None = None
    dropped_stale: int = 0
    dropped_temperature: int = 0
    dropped_backlog: int = 0
    rollback: int | None = None


def next_event(
    store,
    learning,
    wanted: int,
    policy_version: int,
    max_staleness: int | None,
    sample_timeout: float | None,
    temperature: float | None = None,
    max_waiting: int | None = None,
) -> NextEvent:
    """The next thing the trainer does (module docstring). ``learning`` is the ``LearningControl`` or None
    (never paused, no rollback). ``TimeoutError`` after ``sample_timeout`` seconds of waiting for samples
    (paused time not counted); the samples that did arrive stay queued."""
    waited = 0.0
    poll = learning.poll_s if learning is not None else None
    counts = store.queue.drops.counts
    before = dict(counts)
    while True:
        if learning is not None and (version := learning.wait_while_paused()) is not None:
            return NextEvent(rollback=version)
        if learning is not None:
            learning.note_state("waiting for samples")
        left = None if sample_timeout is None else sample_timeout - waited
        wait = left if poll is None else (poll if left is None else min(poll, left))
        try:
            samples = store.queue.wait_for_samples(
                wanted,
                timeout=wait,
                policy_version=policy_version,
                max_staleness=max_staleness,
                temperature=temperature,
                max_waiting=max_waiting,
            )
        except TimeoutError:
            waited += wait
            if left is not None and waited >= sample_timeout:
                raise TimeoutError(
                    f"fewer than {wanted} judged samples arrived within {sample_timeout}s; "
                    "they stay queued for the next run"
                ) from None
            continue
        if learning is not None and learning.paused:
            # paused while this wait was under way: the batch goes back to the queue, untouched
            store.queue.release([s.sample_id for s in samples])
            continue
        dropped = {kind: counts[kind] - before.get(kind, 0) for kind in ("stale", "temperature", "backlog")}
        lineage = store.lineage.lineage()
        for s in samples:
            s.staleness = lineage.staleness(s.policy_version, policy_version)
        if learning is not None:
            learning.note_state("updating")
        return NextEvent(
            samples=samples,
            dropped_stale=dropped["stale"],
            dropped_temperature=dropped["temperature"],
            dropped_backlog=dropped["backlog"],
        )


class StopTraining(Exception):
    """Raised between two updates of a trainer asked to stop (``request_stop``) from another thread."""


def judged_reward(prompts=None, completions=None, **kwargs):
    """Rewards come from the judges through the store, not from reward functions.

    ``GRPOTrainer`` requires a reward source at construction; this one is never called because
    ``OpenClawTrainer`` builds its batches (and advantages) itself.
    """
    raise RuntimeError("OpenClawTrainer reads judged rewards from the store; judged_reward is never called")
