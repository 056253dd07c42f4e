"""Judging: ready turns in, judged training samples out (votes, verdicts, the hint-conditioned teacher)."""

from openclaw_trl.judging.scorer import JudgeConfig

__all__ = ["JudgeConfig"]
