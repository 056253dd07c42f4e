"""Judging: ready turns in, judged training samples out (votes, verdicts, the hint-conditioned teacher).

:class:`Scorer` is the worker (:mod:`~openclaw_trl.judging.scorer`), configured by :class:`JudgeConfig`;
its votes come from one voter per backend (:mod:`~openclaw_trl.judging.voters`: a ``callable`` judge gets a
:class:`JudgeInput` and returns a :class:`Verdict`) and its teacher scores from
:mod:`~openclaw_trl.judging.teacher`.

Best-of-N serving scores a served turn's candidates with the quick judge (:mod:`~openclaw_trl.judging.quick`:
a ``callable`` quick judge gets a :class:`QuickJudgeInput` and returns a number or None) and stores them as a
GRPO group (:mod:`~openclaw_trl.judging.best_of_n`).
"""

from openclaw_trl.judging.best_of_n import BestOfN
from openclaw_trl.judging.config import JudgeConfig
from openclaw_trl.judging.quick import (
    MAX_BEST_OF_N,
    QuickJudge,
    QuickJudgeConfig,
    QuickJudgeInput,
    make_quick_judge,
)
from openclaw_trl.judging.scorer import Scorer
from openclaw_trl.judging.voters import JudgeInput, Verdict, load_callable

__all__ = [
    "MAX_BEST_OF_N",
    "BestOfN",
    "JudgeConfig",
    "JudgeInput",
    "QuickJudge",
    "QuickJudgeConfig",
    "QuickJudgeInput",
    "Scorer",
    "Verdict",
    "load_callable",
    "make_quick_judge",
]
