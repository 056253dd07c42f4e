"""The scorer: turns with a next state in, judged training samples out.

A background worker (its own thread) polls the store for ``ready`` turns, a group of up to
``batch_turns`` at a time, and for each group:

1. asks the judge for votes (per method: PRM votes, hint votes, or both at once), every vote stored with
   its raw text; a failed, timed-out or unparsable vote is a ``None`` vote, never a crash;
2. reduces them: reward = :func:`~openclaw_trl.judge.majority_vote` of the PRM votes, hint =
   :func:`~openclaw_trl.judge.select_hint` of the hint votes;
3. for turns with an accepted hint, scores the original completion ids under the hint-augmented prompt
   (:mod:`openclaw_trl.judging.teacher`);
4. commits votes, verdict and sample in one transaction (``store.judging.save_judgement``).

A turn whose judging raises (a broken judge callable, a malformed stored turn) is judged again alone, so
the other turns of its group go on; after ``max_attempts`` failed attempts it is set aside as ``failed``
with its error (``store.judging.record_judge_failure``) and never blocks later turns. A turn whose accepted
hint could not be teacher-scored (the prompt does not render, or the engine refuses or fails the scoring)
keeps at most its RL reward and is counted (``stats["teacher_failed"]``,
``store.judging.count_teacher_failed``).

Sample rules (a turn yields at most one sample; a turn without a usable verdict yields none, never a
masked placeholder):

========  ==============================  ============================================================
method    judges                          sample when
========  ==============================  ============================================================
rl        m PRM votes                     reward = majority vote is +1 or -1 (``has_hint`` False)
opd       m hint votes                    a hint is accepted (reward 0, ``has_hint`` True, teacher lp)
combine   m PRM + m hint votes, together  a hint is accepted or the reward is ±1; ``has_hint`` only
                                          with a hint (otherwise no teacher log-probs: opd_mask False)
========  ==============================  ============================================================

With ``every_judged_turn`` (set when the RL term has a baseline, ``advantage_baseline: session_mean``) every
judged turn of ``rl`` and ``combine`` becomes a sample, an ``r = 0`` one included (its RL advantage is
``-b``): keeping only the non-zero outcomes would leave the baseline term ``b * grad P(kept)`` in the
expected update (:func:`~openclaw_trl.judge.keeps_sample`).

With ``prm_monitor`` (``opd`` only) the PRM votes run too: the reduced reward is stored on the turn and in
the sample's ``meta["prm_eval_score"]``, for monitoring; the sample rule and the sample's reward (0) stay
OPD's.

The votes come from one voter per backend (:mod:`openclaw_trl.judging.voters`).
The served candidate of a Best-of-N group was chosen by the quick judge, not drawn from the policy: its
sample carries the weight ``(1/N) / P(served)`` (:mod:`~openclaw_trl.judging.best_of_n`), and a candidate
served with certainty (no exploration) gives no sample (counted as ``best_of_n_not_trained``).
A turn sampled greedily (temperature 0) gives no sample: its log-probs are not those of a sampled policy.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
from collections.abc import Callable, Sequence

from openclaw_trl import judge
from openclaw_trl.judging.best_of_n import verdict_weight
from openclaw_trl.judging.config import JudgeConfig
from openclaw_trl.judging.teacher import Teacher
from openclaw_trl.judging.voters import JudgeInput, Verdict, error_text, make_voter
from openclaw_trl.records import Judgement, TrainingSample, Turn
from openclaw_trl.store import Store

log = logging.getLogger(__name__)

_STATS = (
    "judged",
    "samples",
    "none_votes",
    "votes",
    "teacher_calls",
    "teacher_failed",
    "errors",
    "failed_attempts",
    "failed",
    "judge_prompt_too_long",
    "best_of_n_not_trained",
)


class Scorer:
    """The background judge worker (module docstring).

    Args:
        store: where ready turns come from and judged samples go.
        config: a :class:`JudgeConfig`.
        engine: the colocated engine: judge votes (``engine`` backend, ``weights="base"``) and the teacher
            (``opd`` / ``combine``). Required by those.
        tokenizer: the policy tokenizer (default ``engine.tokenizer``), renders judge and teacher prompts.
        judge_fn: a callable judge given directly (instead of ``config.callable``).
        http_client: an ``httpx.Client`` for the ``openai`` backend (tests inject a mock transport).

    ``start()`` / ``stop()`` run the worker thread; ``run_until_idle()`` judges everything ready in the
    calling thread (tests, replay); ``wake()`` makes a sleeping worker look now.
    """

    def __init__(
        self,
        store: Store,
        config: JudgeConfig,
        engine=None,
        tokenizer=None,
        judge_fn: Callable[[JudgeInput], Verdict | None] | None = None,
        http_client=None,
    ):
        self.store = store
        self.config = config
        self.engine = engine
        self.tokenizer = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
        self._check_engine()
        self.stats = dict.fromkeys(_STATS, 0)
        self._pool = cf.ThreadPoolExecutor(config.max_concurrency, thread_name_prefix="openclaw-judge")
        self._voter = make_voter(
            config, engine, self.tokenizer, judge_fn, http_client, self._pool, self.stats
        )
        self._teacher = Teacher(config, engine, self.tokenizer, self.stats)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._in_flight: set[int] = set()
        self._lock = threading.Lock()  # one group at a time (worker thread vs run_until_idle)

    def _check_engine(self) -> None:
        config = self.config
        if config.backend != "engine" and config.method not in ("opd", "combine"):
            return
        if self.engine is None:
            raise ValueError(
                f"method {config.method!r} with backend {config.backend!r} needs the engine "
                "(judge votes with base weights and/or the teacher)"
            )
        if self.tokenizer is None:
            raise ValueError("the scorer needs the policy tokenizer to render judge / teacher prompts")

    # ------------------------------------------------------------------ worker
    def start(self) -> Scorer:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="openclaw-scorer", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop the worker after the group in progress (its judgements are committed or not at all)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._voter.close()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                judged = self.score_once()
            except Exception:  # the worker must survive anything (a locked DB, a bug in one group)
                log.exception("scorer: a scoring round failed; retrying later")
                self.stats["errors"] += 1
                judged = 0
            if not judged:
                self._wake.wait(self.config.poll_interval_s)
                self._wake.clear()

    def run_until_idle(self, max_rounds: int = 1000) -> int:
        """Judge every ready turn now, in this thread; returns how many turns were judged."""
        total = 0
        for _ in range(max_rounds):
            n = self.score_once()
            if n == 0:
                break
            total += n
        return total

    # ------------------------------------------------------------------ one group
    def score_once(self) -> int:
        """Judge one group of ready turns and commit the results; returns the number of turns handled
        (judged, or counted as a failed attempt)."""
        with self._lock:
            turns = self.store.judging.ready_turns(self.config.batch_turns, exclude=self._in_flight)
            if not turns:
                return 0
            self._in_flight.update(t.id for t in turns)
            try:
                for turn, outcome in self._judge_each(turns):
                    if isinstance(outcome, Exception):
                        self._record_failure(turn, outcome)
                        continue
                    try:
                        self._commit(outcome)
                    except Exception as exc:  # noqa: BLE001 - e.g. a sample the store refuses
                        self._record_failure(turn, exc)
            finally:
                self._in_flight.difference_update(t.id for t in turns)
            return len(turns)

    def _judge_each(self, turns: Sequence[Turn]) -> list[tuple[Turn, Judgement | Exception]]:
        """``(turn, judgement or the exception its judging raised)``: a group that raises is judged again
        turn by turn, so one poison turn does not take its group down with it."""
        try:
            return list(zip(turns, self.judge_turns(turns), strict=True))
        except Exception as exc:  # noqa: BLE001
            if len(turns) == 1:
                return [(turns[0], exc)]
            return [pair for turn in turns for pair in self._judge_each([turn])]

    def _commit(self, j: Judgement) -> None:
        sample_id = self.store.judging.save_judgement(j)
        self.stats["judged"] += 1
        self.stats["samples"] += sample_id is not None

    def _record_failure(self, turn: Turn, exc: Exception) -> None:
        error = error_text(exc)
        self.stats["failed_attempts"] += 1
        set_aside = self.store.judging.record_judge_failure(
            turn.id, turn.judge_round, error, self.config.max_attempts
        )
        if set_aside:
            self.stats["failed"] += 1
            log.error(
                "scorer: turn %s failed %d judging attempts and is set aside: %s",
                turn.id,
                self.config.max_attempts,
                error,
            )
        else:
            log.warning("scorer: judging turn %s failed (it will be retried): %s", turn.id, error)

    def judge_turns(self, turns: Sequence[Turn]) -> list[Judgement]:
        """Votes, verdicts, teacher scores and samples for a group of turns (nothing is written)."""
        items = [JudgeInput.from_turn(t) for t in turns]
        judgements = [
            self._verdict(turn, votes) for turn, votes in zip(turns, self._voter.votes(items), strict=True)
        ]
        self._teacher.score(judgements)
        for j in judgements:
            j.sample = self._sample(j)
        return judgements

    def _verdict(self, turn: Turn, votes) -> Judgement:
        """The votes reduced: reward = majority of the PRM votes, hint = the selected hint (capped)."""
        kinds = self.config.kinds
        prm = [v.value for v in votes if v.kind == "prm"]
        hints = [(v.value, v.hint or "") for v in votes if v.kind == "hint"]
        hint = judge.select_hint(hints) if "hint" in kinds else None
        self.stats["votes"] += len(votes)
        self.stats["none_votes"] += sum(v.value is None for v in votes)
        return Judgement(
            turn=turn,
            votes=votes,
            reward=judge.majority_vote(prm) if "prm" in kinds else 0,
            hint=judge.cap_hint(hint, self.config.max_hint_chars),
        )

    def _keeps(self, j: Judgement, has_hint: bool) -> bool:
        """The sample rule of the method (module docstring table, :func:`~openclaw_trl.judge.keeps_sample`)."""
        return judge.keeps_sample(self.config.method, j.reward, has_hint, self.config.every_judged_turn)

    def _served_weight(self, turn: Turn) -> tuple[float | None, dict | None]:
        """``(weight, summary)`` of a turn's sample: 1 for a turn with one completion; for the served candidate
        of a Best-of-N group ``(1/N) / P(served)`` (:func:`~openclaw_trl.judging.best_of_n.verdict_weight`),
        None when it was served with certainty (not trained on)."""
        group = self.store.groups.group_of_turn(turn.id)
        if group is None:
            return 1.0, None
        n = len(group.candidates)
        weight = verdict_weight(n, group.served_prob)
        return weight, {"n": n, "served_prob": group.served_prob, "weight": weight}

    def _sample(self, j: Judgement) -> TrainingSample | None:
        method, turn = self.config.method, j.turn
        if turn.temperature <= 0:
            j.error = "greedy turn (temperature 0): its log-probs are not those of a sampled policy"
            return None
        has_hint = j.hint is not None and j.teacher is not None
        if not self._keeps(j, has_hint):
            return None
        weight, served = self._served_weight(turn)
        if weight is None:
            self.stats["best_of_n_not_trained"] += 1
            return None
        teacher = j.teacher if has_hint else None
        return TrainingSample(
            turn_id=turn.id,
            prompt_ids=turn.prompt_ids,
            completion_ids=turn.completion_ids,
            sampling_logprobs=turn.sampling_logprobs,
            temperature=turn.temperature,
            policy_version=turn.policy_version,
            reward=float(j.reward) if method != "opd" else 0.0,
            has_hint=has_hint,
            hint=j.hint if has_hint else None,
            teacher_logprobs=teacher.logprobs if teacher else None,
            topk_ids=teacher.topk_ids if teacher else None,
            topk_logprobs=teacher.topk_logprobs if teacher else None,
            teacher_prompt_ids=teacher.prompt_ids if teacher else None,
            finish_reason=turn.finish_reason,
            weight=weight,
            meta={
                **({"best_of_n_served": served} if served else {}),
                "method": method,
                "backend": self.config.backend,
                "teacher": self.config.teacher if has_hint else None,
                "next_state_source": turn.next_state_source,
                "finish_reason": turn.finish_reason,
                "session_id": turn.session_id,
                "teacher_prompt_len": len(teacher.prompt_ids) if teacher else None,
                **({"prm_eval_score": float(j.reward)} if self.config.prm_monitor else {}),
            },
        )
