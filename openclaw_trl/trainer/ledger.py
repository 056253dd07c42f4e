"""``BatchLedger``: the trainer's record of the batch it trains on and of what it has used so far.

One batch of ``generation_batch_size`` judged samples is trained by ``updates`` optimizer steps
(``num_iterations * steps_per_generation / gradient_accumulation_steps``, at least 1). The ledger is opened
with the batch (``open``) and told of every optimizer step (``step_done``); the step that closes the batch
returns its sample ids, which are then marked consumed at that step: a restart neither trains on them
again nor loses them.

Owner: the trainer creates it and hands it to the callback that closes batches (``PublishAndConsume``); both
run on the training loop's thread, so the ledger needs no lock. Nobody else writes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from openclaw_trl.records import TrainingSample


@dataclass
class BatchLedger:
    """What the current batch is and how far it is trained; totals over this process's run.

        * ``sample_ids`` / ``turn_ids``: the whole batch (every process's share), empty once it is consumed;
        * ``updates_left``: optimizer steps still to run on it;
        * ``off_policy``: some sample was drawn by other weights or at another temperature (decided on the whole
          batch, so every process takes the same branch);
        * ``score_std``: the std of the batch's Best-of-N quick scores (``scale_rewards: batch``), or None;
        * ``update_started``: ``time.perf_counter()`` when the current update began (after the wait for samples);
    * ``trained``: some update of the batch took an optimizer step; ``skip_reason``: why an update of it was
      skipped (out of memory), None if none was; ``closed_untrained``: the reason of the last batch closed
      without any update trained on it (its samples are kept out of training with it), else None;
        * ``samples_used`` / ``turns_used``: what the batches closed so far held.
    """

    sample_ids: list[int] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    updates_left: int = 0
    off_policy: bool = False
    score_std: float | None = None
    update_started: float = field(default_factory=time.perf_counter)
    samples_used: int = 0
    turns_used: set[int] = field(default_factory=set)
    trained: bool = False
    skip_reason: str | None = None
    closed_untrained: str | None = None
    _skipping: bool = False  # the current update was skipped

    def open(
        self, samples: list[TrainingSample], updates: int, off_policy: bool, score_std: float | None
    ) -> None:
        """A new batch, trained by ``updates`` optimizer steps (at least 1); its update starts now."""
        self.sample_ids = [s.sample_id for s in samples]
        self.turn_ids = [s.turn_id for s in samples]
        self.updates_left = max(1, updates)
        self.off_policy = off_policy
        self.score_std = score_std
        self.update_started = time.perf_counter()
        self.trained, self.skip_reason = False, None

    def skip(self, reason: str, whole_batch: bool) -> None:
        """The current update is skipped for ``reason``; ``whole_batch``: the batch is given up too (its
        step closes it: the next update takes a new batch)."""
        self.skip_reason = reason
        self._skipping = True
        if whole_batch:
            self.updates_left = 1

    def restart_clock(self) -> None:
        """The update starts now (after waiting for its turn among users' trainers)."""
        self.update_started = time.perf_counter()

    def step_done(self) -> tuple[float, list[int]]:
        """One optimizer step ran: ``(seconds since the update started, sample ids of the batch it closed)``.

        The ids are the batch's when this step was its last (the batch is then closed and counted, or, when
        none of its updates trained, left in ``closed_untrained`` with the reason), else empty. The next
        update's time starts now.
        """
        now = time.perf_counter()
        seconds, self.update_started = now - self.update_started, now
        self.updates_left -= 1
        self.closed_untrained = None
        self.trained = self.trained or not self._skipping
        self._skipping = False
        if self.updates_left > 0 or not self.sample_ids:
            return seconds, []
        closed, self.sample_ids = self.sample_ids, []
        self.closed_untrained = None if self.trained else self.skip_reason
        if self.closed_untrained is not None:
            return seconds, closed
        self.samples_used += len(closed)
        self.turns_used.update(self.turn_ids)
        return seconds, closed
