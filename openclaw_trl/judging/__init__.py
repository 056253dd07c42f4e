"""Judging: ready turns in, judged training samples out (votes, verdicts, the hint-conditioned teacher)."""
