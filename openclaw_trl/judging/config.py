"""How turns are judged: :class:`JudgeConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from openclaw_trl import judge


@dataclass
class JudgeConfig:
    """How turns are judged (``OpenClawConfig.judge_config()`` builds one).

    method: ``rl`` / ``opd`` / ``combine`` (the sample rules of :mod:`openclaw_trl.judging.scorer`).
    backend: ``engine`` / ``openai`` / ``callable`` / ``feedback`` (:mod:`openclaw_trl.judging.voters`).
    m: votes per judge per turn (LLM backends; the callable and feedback backends give one vote).
    temperature, top_p, max_tokens: sampling of each judge vote.
    openai_base_url, openai_model, openai_api_key_env: the ``openai`` backend (the key is read from the
        named environment variable when set; no ``Authorization`` header otherwise).
    callable: ``"package.module:function"`` for the ``callable`` backend.
    teacher: ``base`` (adapter disabled, the reference) or ``policy`` (the current adapter) scores the
        hint-augmented prompt.
    kd_topk: also store the teacher's top-K ids and log-probs per position (0 = off).
    max_concurrency: judge calls in flight at once (threads).
    timeout_s: per judge call (an engine batch, one HTTP vote, one callable call) and per teacher scoring call;
        a late vote is a None vote (the engine work is cancelled), a late teacher call loses its OPD sample.
    batch_turns: turns judged (and teacher-scored) together.
    max_attempts: failed judging attempts (an exception, not a None vote) after which a turn is set
        aside as ``failed``.
    max_prompt_tokens: tokens of one engine judge prompt; a longer one is fitted by cutting the next state
        (then the response) in the middle (:func:`~openclaw_trl.judge.fit_judge_messages`), and one the
        instructions alone overflow is a None vote with the error ``judge_prompt_too_long``.
    max_hint_chars: a hint keeps its first ``max_hint_chars`` characters (:func:`~openclaw_trl.judge.cap_hint`)
        before it is stored and added to the teacher prompt.
    poll_interval_s: how often the worker looks for new ready turns when not woken.
    every_judged_turn: with ``rl`` / ``combine``, every judged turn becomes a sample, an ``r = 0`` one
        included: set when the RL term subtracts a baseline (its ``r = 0`` turns then carry ``A = -b``).
    prm_monitor: with method ``opd``, also run the PRM votes; their reduced reward is stored on the turn and
        in the sample's ``meta["prm_eval_score"]`` for monitoring, while the sample rule and the sample's
        ``reward`` (0) stay OPD's.
    """

    method: str = "combine"
    backend: str = "engine"
    m: int = 1
    temperature: float = 0.6
    max_tokens: int = 2048
    top_p: float = 1.0
    openai_base_url: str | None = None
    openai_model: str | None = None
    openai_api_key_env: str | None = "OPENAI_API_KEY"
    callable: str | None = None
    teacher: str = "base"
    kd_topk: int = 0
    max_concurrency: int = 4
    timeout_s: float = 120.0
    batch_turns: int = 8
    max_attempts: int = 3
    poll_interval_s: float = 0.5
    max_prompt_tokens: int = judge.MAX_JUDGE_PROMPT_TOKENS
    max_hint_chars: int = judge.MAX_HINT_CHARS
    prm_monitor: bool = False
    every_judged_turn: bool = False

    def __post_init__(self):
        checks = [
            (self.method in judge.METHODS, f"method must be one of {judge.METHODS}, got {self.method!r}"),
            (
                self.backend in judge.JUDGE_BACKENDS,
                f"backend must be one of {judge.JUDGE_BACKENDS}, got {self.backend!r}",
            ),
            (self.m >= 1, f"m (votes per turn) must be >= 1, got {self.m}"),
            (self.teacher in ("base", "policy"), f"teacher must be 'base' or 'policy', got {self.teacher!r}"),
            (self.kd_topk >= 0, f"kd_topk must be >= 0, got {self.kd_topk}"),
            (self.max_concurrency >= 1, "max_concurrency must be >= 1"),
            (self.timeout_s > 0, "timeout_s must be > 0"),
            (self.batch_turns >= 1, "batch_turns must be >= 1"),
            (self.max_attempts >= 1, f"max_attempts must be >= 1, got {self.max_attempts}"),
            (self.max_tokens >= 1, "max_tokens must be >= 1"),
            (
                self.max_prompt_tokens >= 1 and self.max_hint_chars >= 1,
                "max_prompt_tokens and max_hint_chars must be >= 1",
            ),
            (
                self.backend != "openai" or bool(self.openai_base_url and self.openai_model),
                "backend 'openai' needs openai_base_url and openai_model",
            ),
            (
                self.backend != "callable" or bool(self.callable and ":" in self.callable),
                "backend 'callable' needs callable='package.module:function'",
            ),
            (
                not self.prm_monitor or self.method == "opd",
                f"prm_monitor only applies to method 'opd' (method {self.method!r} trains on the PRM reward)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The judges this method runs: ``prm`` (reward) and/or ``hint`` (both for ``opd`` with ``prm_monitor``)."""
        if self.prm_monitor:
            return ("prm", "hint")
        return {"rl": ("prm",), "opd": ("hint",), "combine": ("prm", "hint")}[self.method]
