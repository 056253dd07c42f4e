"""The values of ``OpenClawConfig``'s own fields: each one in its range, and the combinations that cannot run.

Every check raises ``ValueError`` with a message that names the field, the value it got and what to set
instead. ``config_trl`` checks how the config fits TRL's ``GRPOConfig``; the component configs
(``JudgeConfig``, ``QuickJudgeConfig``, ``SessionConfig``, ``RequestLimits``) check their own fields when the
config builds them.
"""

from __future__ import annotations

from openclaw_trl.judge import JUDGE_BACKENDS
from openclaw_trl.judging import MAX_BEST_OF_N, QuickJudgeConfig

SOURCES = ("live", "replay", "simulated")
"""Where turns come from: served conversations, a replayed export, a simulated user."""
ENGINES = ("hf", "vllm", "vllm_server")
KD_TOPK_SOURCES = ("teacher", "student")
ADVANTAGE_BASELINES = ("none", "session_mean", "batch_mean")
OPD_KD_SCHEDULES = ("constant", "switch", "ramp")
LOG_LEVELS = ("passive", "debug", "info", "warning", "error", "critical")


def check_openclaw_fields(config) -> None:
    """The values of OpenClawConfig's own fields and their combinations (raises ``ValueError`` saying what to set)."""
    config.request_limits()  # raises when a request limit is not a positive integer
    if config.max_context_len is not None and (
        not isinstance(config.max_context_len, int) or config.max_context_len <= config.min_reply_tokens
    ):
        raise ValueError(
            f"max_context_len must be an integer above min_reply_tokens={config.min_reply_tokens} (or null: "
            f"the model's own context), got {config.max_context_len!r}"
        )
    for name in ("max_judge_prompt_tokens", "max_hint_chars", "min_reply_tokens"):
        if not isinstance(getattr(config, name), int) or getattr(config, name) < 1:
            raise ValueError(f"{name} must be a positive integer, got {getattr(config, name)!r}")
    checks = [
        (config.judge_backend in JUDGE_BACKENDS, f"judge_backend must be one of {JUDGE_BACKENDS}"),
        (config.source in SOURCES, f"source must be one of {SOURCES}, got {config.source!r}"),
        (config.engine in ENGINES, f"engine must be one of {ENGINES}, got {config.engine!r}"),
        (config.kd_topk_source in KD_TOPK_SOURCES, f"kd_topk_source must be one of {KD_TOPK_SOURCES}"),
        (config.batch_size >= 1, "batch_size must be >= 1"),
        (
            isinstance(config.prefix_cache_mb, int)
            and not isinstance(config.prefix_cache_mb, bool)
            and config.prefix_cache_mb >= 0,
            f"prefix_cache_mb must be an integer >= 0 (MiB; 0 turns the prefix cache off), got "
            f"{config.prefix_cache_mb!r}",
        ),
        (
            config.max_staleness is None
            or (isinstance(config.max_staleness, int) and config.max_staleness >= 0),
            f"max_staleness must be an integer >= 0 (or null to keep every sample), got {config.max_staleness!r}",
        ),
        (
            isinstance(config.max_samples_waiting, int)
            and not isinstance(config.max_samples_waiting, bool)
            and config.max_samples_waiting >= config.batch_size,
            f"max_samples_waiting must be an integer >= batch_size ({config.batch_size}): an update takes "
            f"batch_size samples from the queue; got {config.max_samples_waiting!r}",
        ),
        (
            not config.prm_monitor or config.method == "opd",
            f"prm_monitor monitors the PRM reward under method opd; method {config.method} already trains on "
            "it (its metrics are rl/reward_mean): set prm_monitor: false or method: opd",
        ),
        (
            config.log_level in LOG_LEVELS and config.log_level_replica in LOG_LEVELS,
            f"log_level and log_level_replica must be one of {', '.join(LOG_LEVELS)}, got "
            f"{config.log_level!r} and {config.log_level_replica!r}",
        ),
        (config.judge_m >= 1, "judge_m must be >= 1"),
        (config.judge_max_attempts >= 1, f"judge_max_attempts must be >= 1, got {config.judge_max_attempts}"),
        (config.w_kd >= 0 and config.kd_cap > 0, "w_kd must be >= 0 and kd_cap > 0"),
        (config.w_kd == 0 or config.kd_topk >= 1, "kd_topk must be >= 1 when w_kd > 0"),
        (
            config.num_generations in (None, 1),
            "num_generations must be 1: a live turn has one completion (for groups of candidates use best_of_n)",
        ),
        (config.temperature > 0, "temperature must be > 0 (it is also the training temperature)"),
        (
            config.judge_backend != "callable" or bool(config.judge_callable),
            "judge_backend=callable needs judge_callable",
        ),
        (
            config.judge_backend != "openai"
            or bool(config.judge_openai_base_url and config.judge_openai_model),
            "judge_backend=openai needs judge_openai_base_url and judge_openai_model",
        ),
        (config.source != "replay" or bool(config.replay_path), "source=replay needs replay_path"),
        (
            not (config.fresh_start and config.resume_from_checkpoint),
            "fresh_start starts at step 0 and resume_from_checkpoint continues a checkpoint: set only one "
            "(without either, a run continues from the latest checkpoint of output_dir)",
        ),
        (
            config.method != "rl" or config.w_kd == 0,
            "top-K distillation needs hints: use method opd or combine",
        ),
        (
            config.engine not in ("vllm", "vllm_server")
            or config.method == "rl"
            or config.temperature == 1.0,
            f"engine {config.engine} scores the OPD teacher with prompt log-probs, which vLLM computes at "
            "temperature 1: set temperature: 1.0 so teacher and student use the same temperature (or use "
            "engine: hf)",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)
    check_baseline_and_schedule(config)
    check_best_of_n(config)
    config.judge_config()  # raises on a method, teacher or judge value the scorer cannot take
    config.session_config()  # raises on a session_idle_timeout or a correction_window_s out of bounds


def check_baseline_and_schedule(config) -> None:
    """``advantage_baseline`` and the OPD -> top-K KD weight schedule."""
    if config.advantage_baseline not in ADVANTAGE_BASELINES:
        raise ValueError(
            f"advantage_baseline must be one of {ADVANTAGE_BASELINES}, got {config.advantage_baseline!r}"
        )
    if config.opd_kd_schedule not in OPD_KD_SCHEDULES:
        raise ValueError(f"opd_kd_schedule must be one of {OPD_KD_SCHEDULES}, got {config.opd_kd_schedule!r}")
    if config.opd_kd_schedule == "constant":
        if config.opd_kd_schedule_steps is not None:
            raise ValueError(
                "opd_kd_schedule_steps is used by opd_kd_schedule switch or ramp: set one of them, "
                "or remove opd_kd_schedule_steps"
            )
        return
    schedule = f"opd_kd_schedule: {config.opd_kd_schedule}"
    if config.w_kd <= 0 or config.method == "rl":
        raise ValueError(
            f"{schedule} moves the weight from OPD to top-K KD: set w_kd > 0 and method opd or combine "
            "(or use opd_kd_schedule: constant)"
        )
    steps = config.opd_kd_schedule_steps
    if steps is None or len(steps) != 2 or not all(isinstance(s, int) and s >= 0 for s in steps):
        raise ValueError(
            f"{schedule} needs opd_kd_schedule_steps: [start, end], two integers >= 0, got {steps!r} "
            "(e.g. --opd_kd_schedule_steps 0 100)"
        )
    if steps[0] > steps[1]:
        raise ValueError(f"opd_kd_schedule_steps must have start <= end, got {steps}")


def check_best_of_n(config) -> None:
    """``best_of_n`` and the fields that only apply to its groups (``scale_rewards`` True/False normalised)."""
    config.scale_rewards = {True: "group", False: "none"}.get(config.scale_rewards, config.scale_rewards)
    n = config.best_of_n
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BEST_OF_N:
        raise ValueError(
            f"best_of_n must be an integer from 1 (off) to {MAX_BEST_OF_N}, got {n!r}: every candidate is "
            "decoded, scored and stored, and the reply waits for all of them"
        )
    if config.scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, got {config.scale_rewards!r}")
    floor = config.group_std_floor
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor < float("inf"):
        raise ValueError(
            f"group_std_floor must be a finite number >= 0 (the quick judge's unit), got {floor!r}"
        )
    coef = config.group_entropy_coef
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not 0 <= coef < float("inf"):
        raise ValueError(
            f"group_entropy_coef must be a finite number >= 0 (quick-judge units per nat of log-probability; "
            f"0 turns it off), got {coef!r}"
        )
    if n == 1:
        unused = [
            name
            for name, value, default in [
                ("scale_rewards", config.scale_rewards, "group"),
                ("group_std_floor", config.group_std_floor, 0.0),
                ("group_entropy_coef", config.group_entropy_coef, 0.0),
                ("quick_judge_backend", config.quick_judge_backend, QuickJudgeConfig.backend),
                ("quick_judge_callable", config.quick_judge_callable, None),
                ("best_of_n_explore", config.best_of_n_explore, QuickJudgeConfig.explore),
                ("quick_judge_hints", config.quick_judge_hints, QuickJudgeConfig.hints),
            ]
            if value != default
        ]
        if unused:
            raise ValueError(
                f"{', '.join(unused)} only apply to Best-of-N groups: set best_of_n > 1, or remove them "
                "(a turn with one completion has no group to score or normalise over)"
            )
        return
    checks = [
        (
            config.w_rl > 0 and config.method != "opd",
            f"best_of_n trains its groups through the RL term (w_rl * A_i), which method {config.method} "
            "turns off (w_rl = 0): use method rl or combine, or best_of_n: 1",
        ),
        (
            config.source != "replay",
            "best_of_n samples candidates when a turn is served; source replay serves nothing: use "
            "source live or simulated, or best_of_n: 1",
        ),
        (
            config.engine != "hf" or n <= config.engine_max_batch_size,
            f"best_of_n={n} candidates decode in one batch after one prefill: raise engine_max_batch_size "
            f"(now {config.engine_max_batch_size}) to at least {n}, or lower best_of_n",
        ),
        (
            config.quick_judge_backend != "openai"
            or bool(config.judge_openai_base_url and config.judge_openai_model),
            "quick_judge_backend=openai sends its ratings to the judges' endpoint: set "
            "judge_openai_base_url and judge_openai_model",
        ),
        (
            config.quick_judge_backend != "callable" or bool(config.quick_judge_callable),
            "quick_judge_backend=callable needs quick_judge_callable (package.module:function)",
        ),
        (
            config.quick_judge_backend != "memory" or config.method != "rl",
            "quick_judge_backend=memory scores candidates with the hints the judge extracts, and method rl "
            "extracts none: use method combine, or another quick_judge_backend",
        ),
        (
            config.quick_judge_backend == "memory" or config.quick_judge_hints == QuickJudgeConfig.hints,
            "quick_judge_hints only applies to quick_judge_backend=memory: set it, or remove quick_judge_hints",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)
    config.quick_judge_config()  # raises on any other value the quick judge cannot take


MAX_ADAPTERS_DEFAULT = 8
"""``max_adapters`` when the recipe leaves it out: every user's adapter resident, up to 8."""


def check_users(config) -> None:
    """``users`` and ``max_adapters``: valid user entries (``users.parse_users``), and nothing that would
    mix the users' runs (one ``store_path`` or one ``api_key_env`` for all, a replay without identities).
    Sets ``max_adapters``' default. Every engine serves an adapter per user: ``hf`` keeps ``max_adapters`` of
    them resident, ``vllm`` batches ``max_adapters`` (+1) of them at once, and the ``vllm_server`` servers must
    run ``--max-loras`` >= ``max_adapters`` (checked when the engine starts)."""
    from openclaw_trl.errors import UserError
    from openclaw_trl.users import MAX_USERS, parse_users

    if not config.users:
        if config.users is not None:
            raise ValueError("users must list at least one {name, api_key_env} entry, or be left out")
        if config.max_adapters is not None:
            raise ValueError("max_adapters only applies with users (one adapter per user); drop it")
        return
    try:
        specs = parse_users(config.users)
    except UserError as err:
        raise ValueError(str(err)) from None
    config.users = [
        {k: v for k, v in vars(s).items() if v is not None or k != "simulated_user"} for s in specs
    ]
    refused = [
        (
            config.store_path is not None,
            "store_path (each user's store is <output_dir>/users/<name>/openclaw.sqlite)",
        ),
        (
            config.api_key_env is not None,
            "api_key_env (each user's own api_key_env selects them; the UI asks for their name and key)",
        ),
        (
            config.source == "replay",
            "source: replay (recorded conversations name no user: replay them in a "
            "run without users, one per person)",
        ),
    ]
    for bad, what in refused:
        if bad:
            raise ValueError(f"users cannot be combined with {what}")
    trackers = [config.report_to] if isinstance(config.report_to, str) else list(config.report_to or [])
    global_run = [t for t in trackers if t not in ("none", "tensorboard")]
    if global_run:
        raise ValueError(
            f"users cannot be combined with report_to: {global_run} (these trackers keep one run per process, "
            "which would mix the users' metrics): use none or tensorboard; each user's metrics are in "
            "<output_dir>/users/<name>/metrics.jsonl"
        )
    if config.max_adapters is None:
        config.max_adapters = min(len(specs), MAX_ADAPTERS_DEFAULT)
    if (
        isinstance(config.max_adapters, bool)
        or not isinstance(config.max_adapters, int)
        or not 1 <= config.max_adapters <= MAX_USERS
    ):
        raise ValueError(
            f"max_adapters must be an integer from 1 to {MAX_USERS}, got {config.max_adapters!r}"
        )
