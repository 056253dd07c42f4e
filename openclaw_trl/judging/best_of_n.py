"""Best-of-N serving, the learning side: score the candidates, choose the one served, store them as a group.

For a trainable turn the server samples ``N`` candidates for the prompt, and :class:`BestOfN`

1. scores each with the quick judge (:mod:`~openclaw_trl.judging.quick`);
2. chooses the candidate to serve (:func:`served_index`): the highest score, the first one on a tie,
   candidate 0 when no candidate has a score;
3. once the served turn is recorded, stores the ``N`` candidates as one group with their scores, and one
   group sample per candidate (:func:`group_samples`) for GRPO: a candidate's reward is its score (a
   candidate without one gets its group's mean, hence a zero advantage), its baseline the group's mean
   and its ``group_std`` the group's std, from which the trainer builds ``A_i = r_i - mean(r)`` scaled as
   ``scale_rewards`` says (``losses.group_relative_advantages``). A group where no candidate has a score
   is stored without samples: there is nothing to learn from it.

The served candidate is also the turn itself, so it goes on through the next-state pipeline (judged into
its RL / OPD sample) like any other turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from openclaw_trl.engines.base import Completion
from openclaw_trl.judging.quick import QuickJudge, QuickJudgeInput
from openclaw_trl.judging.voters import reply_text
from openclaw_trl.losses import group_statistics
from openclaw_trl.records import Candidate, CandidateGroup, TrainingSample


@dataclass
class GroupChoice:
    """The quick scores of a turn's candidates and the one served."""

    scores: list[float | None]
    served_index: int

    def summary(self, group_id: int | None = None) -> dict:
        """What a reply reports about its group (``openclaw.best_of_n``)."""
        return {
            "n": len(self.scores),
            "served_index": self.served_index,
            "scores": list(self.scores),
            "group_id": group_id,
        }


def served_index(scores: list[float | None]) -> int:
    """The candidate to serve: the highest score (the first on a tie), 0 when none has a score."""
    scored = [(s, -i) for i, s in enumerate(scores) if s is not None]
    return -max(scored)[1] if scored else 0


def group_samples(
    turn_id: int,
    prompt_ids: list[int],
    temperature: float,
    completions: list[Completion],
    scores: list[float | None],
    served: int,
) -> list[TrainingSample]:
    """One GRPO sample per non-empty candidate (module docstring); none when no candidate has a score."""
    mean, std = group_statistics(scores)
    if mean is None:
        return []
    return [
        TrainingSample(
            turn_id=turn_id,
            prompt_ids=list(prompt_ids),
            completion_ids=list(c.token_ids),
            sampling_logprobs=list(c.logprobs),
            temperature=temperature,
            policy_version=c.policy_version,
            reward=mean if score is None else float(score),
            baseline=mean,
            group_std=std,
            finish_reason=c.finish_reason,
            meta={"best_of_n": {"index": i, "served": i == served, "score": score}},
        )
        for i, (c, score) in enumerate(zip(completions, scores, strict=True))
        if c.token_ids
    ]


class BestOfN:
    """Scores candidates, chooses the served one and stores the group (module docstring).

    ``n``: candidates per trainable turn; ``quick_judge``: a :class:`~openclaw_trl.judging.quick.QuickJudge`;
    ``store``: the :class:`~openclaw_trl.store.Store` the groups go to.
    """

    def __init__(self, n: int, quick_judge: QuickJudge, store):
        self.n, self.quick_judge, self.store = n, quick_judge, store

    def choose(self, messages: list[dict], session_id: str, replies: list[dict]) -> GroupChoice:
        """Score each candidate (``replies``: its assistant message as the client would receive it) for the
        conversation ``messages``; choose the one to serve."""
        items = [
            QuickJudgeInput(messages=messages, response=reply_text(r), session_id=session_id) for r in replies
        ]
        scores = self.quick_judge.scores(items)
        return GroupChoice(scores, served_index(scores))

    def record(
        self,
        turn_id: int,
        prompt_ids: list[int],
        temperature: float,
        completions: list[Completion],
        texts: list[str],
        choice: GroupChoice,
    ) -> int:
        """Store the group of the served turn ``turn_id`` and its samples; returns the group id.

        ``texts``: each candidate's decoded completion (special tokens kept).
        """
        mean, std = group_statistics(choice.scores)
        candidates = [
            Candidate(list(c.token_ids), list(c.logprobs), text, c.finish_reason, c.policy_version, score)
            for c, text, score in zip(completions, texts, choice.scores, strict=True)
        ]
        group = CandidateGroup(turn_id, self.quick_judge.backend, choice.served_index, candidates, mean, std)
        samples = group_samples(
            turn_id, prompt_ids, temperature, completions, choice.scores, choice.served_index
        )
        return self.store.add_group(group, samples)

    def close(self) -> None:
        self.quick_judge.close()
