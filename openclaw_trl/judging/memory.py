"""The ``memory`` quick judge: score Best-of-N candidates with what the user already said.

Before the user has read a reply, the only evidence of what they want is what they said earlier: the
hints the judge extracted from their corrections and requests ("Please answer as a bulleted list") are
in the store. This backend asks the model itself how much better each candidate fits once those hints
are in the prompt: the hindsight teacher of OPD, applied before the user answers. For candidate ``y``
of prompt ``x`` and the ``n`` most recent hints, with ``w_h`` the share of hint ``h`` among them::

    score(y) = sum_h w_h * log pi_T(y | x + h) - log pi_T(y | x)

Both terms are log-probabilities of the candidate's tokens (summed, at its sampling temperature) under the
same weights ``pi_T`` (``teacher``: ``base`` or ``policy``); ``x + h`` is ``judge.append_hint`` on the
conversation (the OPD teacher's context). The difference is the log-likelihood ratio of the candidate with
and without the hints, i.e. (Bayes) how much the candidate makes those requests more likely: a candidate
that does what the user asked gains, one that ignores it loses. Because one set of weights is on both sides,
the score measures the hints' effect only: it does not move as the policy learns (with ``teacher: base`` it
does not depend on the adapter at all), whereas subtracting the policy's own log-probability would add
``log pi_T(y|x) - log pi(y|x)``, a pull back towards the teacher that grows with every update and reorders
the candidates once the policy has learned. Weighting each distinct hint by its share makes a wrong hint (a
judge that misread a correction) one vote among ``n``, not the whole criterion.

Where the hints come from: the ``n`` most recently judged turns with a hint, of the sessions not marked
private. With no hint yet every score is None, so the first candidate is served, exactly as without
Best-of-N, and the group is not trained on.

Cost: one ``engine.score`` call per turn, of ``N x (distinct hints + 1)`` rows (at most ``N x (n + 1)``: the
``+ 1`` is the prompt without hints) at ``serve`` priority and within ``timeout_s``; the rows share their
conversation prefix (the HF engine's prefix cache computes it once). A hint-augmented prompt longer than ``max_prompt_tokens`` gives that candidate no
score, so a long agent prompt cannot hold the engine.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from openclaw_trl import judge

logger = logging.getLogger(__name__)


class HintMemory:
    """Scores candidates by their hint-conditioned log-likelihood gain (module docstring).

    ``recent_hints(n)``: the ``n`` most recent hints, oldest first (``store.queries.recent_hints``);
    ``engine`` / ``tokenizer``: the serving engine; ``hints``: how many recent hints count; ``teacher``:
    ``base`` or ``policy`` weights.
    """

    def __init__(
        self,
        recent_hints: Callable[[int], list[str]],
        engine,
        tokenizer,
        hints: int,
        teacher: str,
        max_prompt_tokens: int,
        timeout_s: float,
    ):
        self.recent_hints, self.engine, self.tokenizer = recent_hints, engine, tokenizer
        self.hints, self.teacher = hints, teacher
        self.max_prompt_tokens, self.timeout_s = max_prompt_tokens, timeout_s

    def hint_shares(self) -> dict[str, float]:
        """Each distinct recent hint and its share of the ``hints`` most recent ones (empty: none yet)."""
        recent = [h.strip() for h in self.recent_hints(self.hints) if h and h.strip()]
        return {h: c / len(recent) for h, c in Counter(recent).items()}

    def scores(self, items) -> list[float | None]:
        """One score per ``QuickJudgeInput`` (None: no hint yet, no sample, a prompt too long, or a failure)."""
        out: list[float | None] = [None] * len(items)
        shares = self.hint_shares()
        if not shares:
            return out
        rows = self._rows(items, shares)
        if not rows:
            return out
        sums: dict[int, float] = {}  # item index -> sum_h w_h log pi_T(y | x + h) - log pi_T(y | x)
        for temperature in sorted({items[i].temperature for i, _, _ in rows}):
            group = [r for r in rows if items[r[0]].temperature == temperature]
            teacher = self._score(items, group, temperature)
            for (i, share, _), logprobs in zip(group, teacher or ()):
                sums[i] = sums.get(i, 0.0) + share * sum(logprobs)
        for i, value in sums.items():
            out[i] = value
        return out

    def _rows(self, items, shares: dict[str, float]) -> list[tuple[int, float, list[int]]]:
        """``(item index, weight, prompt ids)`` for every candidate that can be scored: one row per distinct hint
        (its share, the hint-augmented prompt) and one for the prompt as it is (weight -1)."""
        from openclaw_trl.chat import render_prompt_ids

        prompts: dict[tuple[int, str], list[int] | None] = {}
        rows = []
        for i, item in enumerate(items):
            if not item.completion_ids or len(item.logprobs) != len(item.completion_ids):
                continue  # an empty candidate, or one whose sampling log-probs are unknown: no score
            if item.temperature <= 0:
                continue  # greedy: the log-probs are not a sampling distribution
            item_rows = []
            for hint, share in [*shares.items(), (None, -1.0)]:
                key = (id(item.messages), hint)
                if key not in prompts:
                    try:
                        messages = item.messages if hint is None else judge.append_hint(item.messages, hint)
                        ids = render_prompt_ids(self.tokenizer, messages, item.tools)
                        prompts[key] = list(ids) if len(ids) <= self.max_prompt_tokens else None
                    except Exception as exc:  # noqa: BLE001 - a prompt that does not render: no score
                        logger.warning("memory quick judge: the hinted prompt does not render: %s", exc)
                        prompts[key] = None
                if prompts[key] is None:
                    item_rows = []
                    break
                item_rows.append((i, share, prompts[key]))
            rows += item_rows
        return rows

    def _score(self, items, group, temperature: float) -> list[list[float]] | None:
        """The teacher log-probs of every row of ``group`` in one batched call; None when it fails."""
        try:
            scores = self.engine.score(
                [ids for _, _, ids in group],
                [list(items[i].completion_ids) for i, _, _ in group],
                weights=self.teacher,
                temperature=temperature,
                priority="serve",
                timeout_s=self.timeout_s,
            )
        except TimeoutError:
            logger.warning("memory quick judge timed out after %.1f s: no score", self.timeout_s)
            return None
        except Exception:  # noqa: BLE001 - a failed score is no opinion, never a failed chat request
            logger.exception("memory quick judge failed: no score")
            return None
        logprobs = [list(lp) for lp in scores.logprobs]
        if len(logprobs) != len(group) or any(
            len(lp) != len(items[i].completion_ids) for lp, (i, _, _) in zip(logprobs, group)
        ):
            logger.warning("memory quick judge: the engine returned the wrong number of log-probs: no score")
            return None
        return logprobs
