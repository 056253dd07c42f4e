"""Best-of-N serving, the learning side: score the candidates, choose the one served, store them as a group.

For a trainable turn the server samples ``N`` candidates for the prompt, and :class:`BestOfN`

1. scores each with the quick judge (:mod:`~openclaw_trl.judging.quick`);
2. chooses the candidate to serve (:func:`choose_served`): with probability ``1 - explore`` the best
   (:func:`served_index`: the highest score, the first one on a tie, candidate 0 when no candidate has a
   score), with probability ``explore`` a uniformly random one; it records ``P(served = i | candidates) =
   (1 - explore) * 1(i in B) / |B| + explore / N``, ``B`` the candidates tied at the highest score (all
   ``N`` when none has a score);
3. once the served turn is recorded, stores the ``N`` candidates as one group with their scores, and one
   group sample per candidate (:func:`group_samples`) for GRPO: a candidate's reward is its score (a
   candidate without one gets its group's mean, hence a zero advantage), its baseline the group's mean
   and its ``group_std`` the group's std, from which the trainer builds ``A_i = r_i - mean(r)`` scaled as
   ``scale_rewards`` says (``losses.group_relative_advantages``). A group where no candidate has a score
   is stored without samples: there is nothing to learn from it.

With an entropy coefficient ``lambda > 0`` (``group_entropy_coef``) a candidate's reward is its score minus
``lambda`` times its log-probability under the policy that sampled it (:func:`group_rewards`)::

    r_i = score_i - lambda * log pi(y_i | x)

the sum of the candidate's per-token sampling log-probs. The expected reward is then ``E_pi[score] +
lambda * H(pi)``, maximised by ``pi(y) ~ exp(score(y) / lambda)``: replies the quick judge scores the same
keep the same probability, and a reply the policy already favours earns less for being sampled again, so
the groups stop concentrating the policy on the few replies that happen to score highest among equally
good ones. ``lambda = 0`` is the plain score. The group's own record keeps the quick judge's scores; only
the samples' rewards, baseline and std are the regularised ones.

The served candidate is also the turn itself, so it goes on through the next-state pipeline, but its
verdict is not a policy sample: the served reply was drawn from the selection, not from the policy. Its
sample is weighted by the importance weight of the pick (:func:`verdict_weight`)::

    w = (1/N) / P(served = i | candidates)

The ``N`` candidates are independent draws of the policy, so a uniformly random one of them is a draw of
the policy; reweighting the actual pick to that uniform one gives ``E[w * A * grad log pi(y_served)] =
E[(1/N) sum_i A(y_i) grad log pi(y_i)] = E_pi[A grad log pi]``: the on-policy gradient, exactly. Ties
count as what they are: among candidates the judge cannot tell apart, taking the first is the same as
taking one of them uniformly at random (the candidates are exchangeable draws), so each of the ``|B|``
tied ones has ``(1 - explore) / |B|`` of the pick. When no candidate has a score, or all are tied, ``B``
is every candidate, the served one is a plain draw of the policy and ``w = 1``. With ``explore = 0`` and
a unique best the other candidates are never served, no weight can make up for them, and the verdict is
not trained on (its turn keeps the reward; the group samples are trained as always).
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from openclaw_trl.engines.base import Completion
from openclaw_trl.judging.quick import QuickJudge, QuickJudgeConfig, QuickJudgeInput
from openclaw_trl.judging.voters import reply_text
from openclaw_trl.losses import group_statistics
from openclaw_trl.records import Candidate, CandidateGroup, TrainingSample


@dataclass
class GroupChoice:
    """The quick scores of a turn's candidates, the one served and its probability of being served."""

    scores: list[float | None]
    served_index: int
    served_prob: float = 1.0  # P(served = served_index | candidates)

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


def best_candidates(scores: list[float | None]) -> list[int]:
    """The candidates tied at the highest score; every candidate when none has a score."""
    scored = [s for s in scores if s is not None]
    if not scored:
        return list(range(len(scores)))
    top = max(scored)
    return [i for i, s in enumerate(scores) if s is not None and s == top]


def choose_served(scores: list[float | None], explore: float, rng: random.Random) -> tuple[int, float]:
    """``(index served, P(served = index | candidates))``: the best (:func:`served_index`) with probability
    ``1 - explore``, a uniformly random candidate with probability ``explore``."""
    n, best = len(scores), best_candidates(scores)
    index = rng.randrange(n) if explore > 0 and rng.random() < explore else served_index(scores)
    return index, served_probability(index in best, len(best), n, explore)


def served_probability(is_best: bool, n_best: int, n: int, explore: float) -> float:
    """``P(served = i | candidates) = (1 - explore) * 1(i in B) / |B| + explore / n`` (``n_best`` = ``|B|``)."""
    return (1.0 - explore) * float(is_best) / n_best + explore / n


def verdict_weight(n: int, served_prob: float | None) -> float | None:
    """The weight of a served candidate's verdict sample, ``(1/n) / P(served)`` (module docstring); None when
    the candidate was chosen with certainty among several (``explore = 0``, or a group stored without its
    probability): no weight is unbiased then, the verdict is not trained on."""
    if n <= 1:
        return 1.0
    if served_prob is None or served_prob >= 1.0:
        return None
    weight = (1.0 / n) / served_prob
    return 1.0 if abs(weight - 1.0) < 1e-9 else weight


def group_rewards(
    scores: list[float | None], completions: list[Completion], entropy_coef: float = 0.0
) -> list[float | None]:
    """Each candidate's reward ``score_i - entropy_coef * sum(sampling log-probs of y_i)`` (module
    docstring); None stays None (no score, no reward). ``entropy_coef = 0`` returns the scores as they are."""
    if not entropy_coef:
        return list(scores)
    return [
        None if score is None else float(score) - entropy_coef * float(sum(c.logprobs))
        for score, c in zip(scores, completions, strict=True)
    ]


def group_samples(
    turn_id: int,
    prompt_ids: list[int],
    temperature: float,
    completions: list[Completion],
    scores: list[float | None],
    served: int,
    entropy_coef: float = 0.0,
) -> list[TrainingSample]:
    """One GRPO sample per non-empty candidate (module docstring); none when no candidate has a score.
    Each sample's reward, baseline and ``group_std`` are of :func:`group_rewards`; its ``meta`` keeps the
    quick judge's own score."""
    rewards = group_rewards(scores, completions, entropy_coef)
    mean, std = group_statistics(rewards)
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
            reward=mean if reward is None else float(reward),
            baseline=mean,
            group_std=std,
            finish_reason=c.finish_reason,
            meta={"best_of_n": {"index": i, "served": i == served, "score": score}},
        )
        for i, (c, score, reward) in enumerate(zip(completions, scores, rewards, strict=True))
        if c.token_ids
    ]


class BestOfN:
    """Scores candidates, chooses the served one and stores the group (module docstring).

    ``n``: candidates per trainable turn; ``quick_judge``: a :class:`~openclaw_trl.judging.quick.QuickJudge`;
    ``store``: the :class:`~openclaw_trl.store.Store` the groups go to; ``explore``: the chance of serving
    a uniformly random candidate instead of the best; ``seed``: of that choice (None: from the OS);
    ``entropy_coef``: the ``lambda >= 0`` of the groups' entropy-regularised rewards (:func:`group_rewards`).
    """

    def __init__(
        self,
        n: int,
        quick_judge: QuickJudge,
        store,
        explore: float = QuickJudgeConfig.explore,
        seed: int | None = None,
        entropy_coef: float = QuickJudgeConfig.entropy_coef,
    ):
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must be a probability in [0, 1], got {explore!r}")
        if not 0.0 <= entropy_coef < float("inf"):
            raise ValueError(f"entropy_coef must be a finite number >= 0, got {entropy_coef!r}")
        self.n, self.quick_judge, self.store, self.explore = n, quick_judge, store, explore
        self.entropy_coef = float(entropy_coef)
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()

    def choose(
        self,
        messages: list[dict],
        session_id: str,
        replies: list[dict],
        completions: list[Completion] | None = None,
        temperature: float = 1.0,
        tools: list[dict] | None = None,
        seed: int | None = None,
    ) -> GroupChoice:
        """Score each candidate (``replies``: its assistant message as the client would receive it;
        ``completions``: the same candidates as sampled, at ``temperature``, with the request's ``tools``)
        for the conversation ``messages``; choose the one to serve. A request with a ``seed`` draws its
        explore pick from that seed, so the same seeded request serves the same candidate."""
        sampled = completions if completions is not None else [None] * len(replies)
        items = [
            QuickJudgeInput(
                messages=messages,
                response=reply_text(r),
                session_id=session_id,
                completion_ids=tuple(c.token_ids) if c is not None else (),
                logprobs=tuple(c.logprobs or ()) if c is not None else (),
                temperature=temperature,
                tools=tools,
            )
            for r, c in zip(replies, sampled, strict=True)
        ]
        scores = self.quick_judge.scores(items)
        if seed is not None:
            index, prob = choose_served(scores, self.explore, random.Random(seed))
        else:
            with self._rng_lock:
                index, prob = choose_served(scores, self.explore, self._rng)
        return GroupChoice(scores, index, prob)

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
        group = CandidateGroup(
            turn_id, self.quick_judge.backend, choice.served_index, candidates, mean, std, choice.served_prob
        )
        samples = group_samples(
            turn_id,
            prompt_ids,
            temperature,
            completions,
            choice.scores,
            choice.served_index,
            self.entropy_coef,
        )
        return self.store.groups.add_group(group, samples)

    def close(self) -> None:
        self.quick_judge.close()
