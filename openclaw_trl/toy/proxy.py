"""A quick judge for Best-of-N serving in the toy world: a noisy proxy of the user's hidden preference.

The toy user (:func:`openclaw_trl.toy.world.make_user`) wants bulleted answers by default (any
:func:`~openclaw_trl.toy.world.preference` spec: a style, ``brief``, or both). A quick judge scores each
candidate reply *before* the user has seen it, so it cannot read the user's reaction; this one plays a
cheap, imperfect reward model that knows the preference: it scores a candidate 1 when it meets the
preference and 0 otherwise, and with probability ``1 - accuracy`` it returns the opposite. It is
not an oracle (an oracle would make Best-of-N trivially perfect).

The noise is seeded by the candidate itself: whether a score is flipped is drawn from
``random.Random(f"{seed}:{session_id}:{len(messages)}:{response}")``, so the same candidate in the same
place of the same session always gets the same score (a rerun with the same candidates picks the same
one, whatever order they are scored in), and distinct candidates are flipped independently.

``quick_judge_callable: openclaw_trl.toy.proxy:quick_judge`` selects it (preferred style
:data:`~openclaw_trl.toy.world.PREFERRED`, accuracy :data:`ACCURACY`); :class:`StyleProxy` takes other
settings. It is called as ``fn(turn) -> float`` where ``turn`` has ``messages`` (the prompt conversation,
OpenAI format), ``response`` (the candidate's text) and ``session_id``; higher is better.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from openclaw_trl.toy import world

ACCURACY = 0.7
"""How often :func:`quick_judge` scores a candidate correctly (1 when it meets the preference, else 0)."""


@dataclass(frozen=True)
class StyleProxy:
    """Scores a candidate 1 if it meets ``preferred`` (a :func:`~openclaw_trl.toy.world.preference` spec,
    e.g. ``"bullets"`` or ``"bullets+brief"``) else 0, wrong with probability ``1 - accuracy``."""

    preferred: str = world.PREFERRED
    accuracy: float = ACCURACY
    seed: int = 0

    def __post_init__(self):
        world.preference(self.preferred)  # a ValueError saying what is allowed
        if not 0.0 <= self.accuracy <= 1.0:
            raise ValueError(f"accuracy is a probability in [0, 1], got {self.accuracy}")

    def __call__(self, turn) -> float:
        response = turn.response or ""
        right = 1.0 if world.preference(self.preferred).matches(response) else 0.0
        messages = getattr(turn, "messages", None) or []
        rng = random.Random(f"{self.seed}:{turn.session_id}:{len(messages)}:{response}")
        return right if rng.random() < self.accuracy else 1.0 - right


def quick_judge(turn) -> float:
    """The default :class:`StyleProxy` (bulleted answers, right with probability 0.7)."""
    return StyleProxy()(turn)
