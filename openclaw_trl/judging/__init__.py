"""Judging: ready turns in, judged training samples out (votes, verdicts, the hint-conditioned teacher).

:class:`Scorer` is the worker (:mod:`~openclaw_trl.judging.scorer`), configured by :class:`JudgeConfig`;
its votes come from one voter per backend (:mod:`~openclaw_trl.judging.voters`: a ``callable`` judge gets a
:class:`JudgeInput` and returns a :class:`Verdict`) and its teacher scores from
:mod:`~openclaw_trl.judging.teacher`.
"""

from openclaw_trl.judging.config import JudgeConfig
from openclaw_trl.judging.scorer import Scorer
from openclaw_trl.judging.voters import JudgeInput, Verdict, load_callable

__all__ = ["JudgeConfig", "JudgeInput", "Scorer", "Verdict", "load_callable"]
