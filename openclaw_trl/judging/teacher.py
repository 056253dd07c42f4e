"""The hint-conditioned teacher: log-probs of a turn's own completion under its hint-augmented prompt.

For a turn with an accepted hint the teacher context is :func:`~openclaw_trl.judge.append_hint` on the
turn's own prompt messages, same tools, rendered with the policy tokenizer. The **original completion
ids** are scored under it (ids are concatenated, never re-tokenized: decoding and re-encoding a reply does
not give back the sampled ids), with one batched ``engine.score`` call per sampling temperature; the
log-probs are at the turn's sampling temperature, the convention of the engines' ``score``. The teacher
weights are ``JudgeConfig.teacher``: ``base`` (adapter disabled) or ``policy``; with ``kd_topk > 0`` the
teacher's top-K ids and log-probs per position come along.

A turn whose teacher fails (its prompt does not render, the engine refuses or fails the scoring, or it
returns the wrong number of log-probs) keeps ``teacher = None`` and an error starting with
``TEACHER_ERROR_PREFIX``; a failing batch is scored again turn by turn so the others keep their teacher.
"""

from __future__ import annotations

import logging

from openclaw_trl import judge
from openclaw_trl.judging.config import JudgeConfig
from openclaw_trl.judging.voters import error_text
from openclaw_trl.records import Judgement, TeacherScore
from openclaw_trl.store import TEACHER_ERROR_PREFIX

log = logging.getLogger(__name__)


class Teacher:
    """Scores the judgements with an accepted hint (sets ``Judgement.teacher``, or the error).

    ``stats["teacher_calls"]`` counts ``engine.score`` calls, ``stats["teacher_failed"]`` turns that lost
    their teacher.
    """

    def __init__(self, config: JudgeConfig, engine, tokenizer, stats: dict[str, int]):
        self.config, self.engine, self.tokenizer, self.stats = config, engine, tokenizer, stats

    def score(self, judgements: list[Judgement]) -> None:
        """Teacher log-probs for every judgement with a hint (greedy turns are skipped: no sample)."""
        by_temperature: dict[float, list[tuple[Judgement, list[int]]]] = {}
        for j in judgements:
            j.teacher = None
            if j.hint is None:
                continue
            ids = self._prompt_ids(j)
            if ids is None or j.turn.temperature <= 0:
                continue
            by_temperature.setdefault(j.turn.temperature, []).append((j, ids))
        for temperature, group in by_temperature.items():
            self._score_group(group, temperature, split_on_failure=True)

    def _prompt_ids(self, j: Judgement) -> list[int] | None:
        """The hint-augmented prompt of the turn, rendered; None (and the error) when it cannot be."""
        from openclaw_trl.chat import render_prompt_ids

        try:
            enhanced = judge.append_hint(j.turn.prompt_messages, j.hint)
            return list(render_prompt_ids(self.tokenizer, enhanced, j.turn.tools))
        except Exception as exc:  # noqa: BLE001
            self._failed(j, f"{TEACHER_ERROR_PREFIX} prompt: {error_text(exc)}")
            return None

    def _score_group(
        self, group: list[tuple[Judgement, list[int]]], temperature: float, split_on_failure: bool
    ):
        try:
            self.stats["teacher_calls"] += 1
            scores = self.engine.score(
                [ids for _, ids in group],
                [j.turn.completion_ids for j, _ in group],
                weights=self.config.teacher,
                top_k=self.config.kd_topk,
                temperature=temperature,
                priority="learn",
                timeout_s=self.config.timeout_s,
            )
        except Exception as exc:  # noqa: BLE001 - the turns are judged without a teacher (no OPD sample)
            if (
                split_on_failure and len(group) > 1 and not isinstance(exc, TimeoutError)
            ):  # find the turn that fails; score the others
                for item in group:
                    self._score_group([item], temperature, split_on_failure=False)
                return
            log.warning(
                "scorer: teacher scoring failed for turn(s) %s: %s", [j.turn.id for j, _ in group], exc
            )
            for j, _ in group:
                self._failed(j, f"{TEACHER_ERROR_PREFIX}: {error_text(exc)}")
            return
        for n, (j, ids) in enumerate(group):
            teacher = TeacherScore(logprobs=list(scores.logprobs[n]), prompt_ids=ids)
            if self.config.kd_topk > 0 and scores.topk_ids is not None:
                teacher.topk_ids, teacher.topk_logprobs = scores.topk_ids[n], scores.topk_logprobs[n]
            if len(teacher.logprobs) != len(j.turn.completion_ids):
                self._failed(j, f"{TEACHER_ERROR_PREFIX}: wrong number of log-probs")
                continue
            j.teacher = teacher

    def _failed(self, j: Judgement, error: str) -> None:
        j.error = error
        self.stats["teacher_failed"] += 1
