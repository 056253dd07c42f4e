"""The learning benchmark's rows (a method, its recipe overrides, the user's hidden preference, whether a judge
reads that preference), its recipe (``BenchSettings``) and what one run records (``RunResult``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field

from openclaw_trl.toy import world as toy_world

RULE_JUDGE = "openclaw_trl.simulation:rule_judge"
PROXY_JUDGE = "openclaw_trl.toy.proxy:quick_judge"


@dataclass(frozen=True)
class Row:
    """One row of the report: a training method, the recipe fields that differ from Combine's, the user's
    hidden preference, and whether any of its judges reads that preference (``oracle``: an upper bound,
    not a result a user can get)."""

    name: str  # the --methods name and the cache file prefix
    label: str  # as printed in the tables
    method: str
    backend: str = "callable"
    fields: tuple[tuple[str, object], ...] = ()  # OpenClawConfig overrides
    best_of: int = 1  # candidates per served turn (the evaluation's serving selection)
    first_seed_only: bool = False
    preference: str = toy_world.PREFERRED  # the simulated user's hidden preference (world.preference)
    update_factor: int = 1  # updates = BenchSettings.updates x this
    oracle: bool = False  # a judge of this row reads the hidden preference

    @property
    def quick_judge(self) -> str | None:
        """The Best-of-N quick judge backend (None without Best-of-N)."""
        return dict(self.fields).get("quick_judge_backend") if self.best_of > 1 else None


def bo4(quick: str) -> tuple[tuple[str, object], ...]:
    """The recipe fields of Combine + Best-of-4 with the ``quick`` quick judge backend. The group advantages
    are divided by the group's score std (``scale_rewards: group``): the quick judges score on different
    scales (the memory judge's log-likelihood gains run to tens of nats, the proxy's are 0 or 1), and this
    puts every row's group samples on the scale of the judged ones (|A| about 1)."""
    return (("best_of_n", 4), ("quick_judge_backend", quick), ("scale_rewards", "group"))


BO4_UPDATE_FACTOR = 2
"""A Best-of-4 run makes twice the updates of the others (32 by default): its batches fill in about one
conversation each, so 16 updates would end the run after ~20 conversations; 32 show where it stands after 30."""
PREFERENCE_LABELS = {"brief": "brief answers", "bullets+brief": "bullets and brief"}


def preference_rows(preference: str, suffix: str) -> tuple[Row, ...]:
    """Combine and Combine + Best-of-4 (memory quick judge) for a user who wants ``preference``."""
    label = PREFERENCE_LABELS[preference]
    return (
        Row(f"combine-{suffix}", f"Combine [{label}]", "combine", preference=preference),
        Row(
            f"combine+bo4+memory-{suffix}",
            f"Combine + best-of-4, memory judge [{label}]",
            "combine",
            fields=bo4("memory"),
            best_of=4,
            preference=preference,
            update_factor=BO4_UPDATE_FACTOR,
        ),
    )


ROWS: dict[str, Row] = {
    r.name: r
    for r in (
        Row("combine", "Combine", "combine"),
        Row(
            "combine+bo4+memory",
            "Combine + best-of-4, memory judge",
            "combine",
            fields=bo4("memory"),
            best_of=4,
            update_factor=BO4_UPDATE_FACTOR,
        ),
        Row(  # no score, no group sample: its batches fill as Combine's do, so it makes as many updates
            "combine+bo4+engine",
            "Combine + best-of-4, engine judge",
            "combine",
            fields=bo4("engine"),
            best_of=4,
        ),
        Row(
            "combine+bo4+proxy",
            "Combine + best-of-4, proxy judge told the preference (upper bound)",
            "combine",
            fields=(*bo4("callable"), ("quick_judge_callable", PROXY_JUDGE)),
            best_of=4,
            update_factor=BO4_UPDATE_FACTOR,
            oracle=True,
        ),
        *preference_rows("brief", "brief"),
        *preference_rows("bullets+brief", "both"),
        Row("rl", "RL", "rl"),
        Row("opd", "OPD", "opd"),
        Row(
            "combine+baseline",
            "Combine + session baseline",
            "combine",
            fields=(("advantage_baseline", "session_mean"),),
        ),
        Row(
            "combine+feedback",
            "Combine, feedback backend",
            "combine",
            backend="feedback",
            first_seed_only=True,
        ),
    )
}
DEFAULT_ROWS = [name for name in ROWS if name not in ("rl", "opd", "combine+baseline", "combine+feedback")]
"""The rows a plain run makes: no-oracle rows for each preference, and the proxy row as an upper bound (the
method comparison rows are added with ``--methods``)."""
LABELS = {name: row.label for name, row in ROWS.items()}


@dataclass
class BenchSettings:
    """The benchmark recipe (not the library defaults): chosen for this world from a sweep over 5 seeds
    (docs/learning.md, "Step size"). Plain SGD with the gradient clipped to ``max_grad_norm``: every update
    moves the adapter by at most ``learning_rate * max_grad_norm`` (0.3) and in the direction of this batch's
    gradient only. Adam (lr 2e-3) moved every coordinate by about the learning rate whatever the gradient's
    size, kept moving on momentum after the signal stopped, and broke the toy model's answers in 10 of 10 runs;
    SGD at lr 10 learns twice as fast and breaks the answers in 3 of 4. The RL term's
    baseline is the batch's other judged samples' mean reward (``batch_mean``): without it a batch of liked
    replies sharpens the policy onto the few it sampled (distinct answers 0.92 -> 0.44)."""

    updates: int = 16
    batch_size: int = 8
    learning_rate: float = 3.0
    max_grad_norm: float = 0.1  # normal updates' gradient norms are 0.05-0.5
    optim: str = "sgd"  # the optimizer and its schedule: TrainingArguments' names
    adam_epsilon: float = 1e-8
    warmup_steps: int = 0
    weight_decay: float = 0.0
    lr_scheduler_type: str = "constant"
    beta: float = 0.0  # TRL's per-token KL penalty to the base (the adapter switched off)
    advantage_baseline: str = "batch_mean"  # the RL term's baseline: none, session_mean or batch_mean
    loss_type: str = "dapo"  # TRL's aggregation of the per-token loss: grpo, bnpo, dr_grpo, dapo
    guard: str = "on"  # the version guard: on, off, or observe (signals logged, no version held back)
    lora_r: int = 8
    lora_alpha: int = 16
    num_iterations: int = 1
    w_rl: float = 1.0  # Combine's weights (the library defaults); rl / opd force one of them to 0
    w_opd: float = 1.0
    temperature: float = 1.0
    teacher: str = "base"  # the OPD teacher's (and the memory quick judge's) weights: base or policy
    max_tokens: int = 40
    eval_per_topic: int = 8
    eval_seed: int = 777
    preferred: str = toy_world.PREFERRED  # a run's own: its row's preference
    max_conversations: int = 480  # per run: OPD learns from failures only, so it needs ever more talk
    sample_timeout_s: float = 600.0
    group_std_floor: float = 0.0  # Best-of-N rows: the floor of the group std (nats of the memory judge)
    group_entropy_coef: float = 0.0  # Best-of-N rows: reward = score - coef * log pi(candidate)
    schedule: str = (
        "lockstep"  # lockstep: a run is a function of its seed; live: batches follow thread timing
    )


@dataclass
class RunResult:
    row: str
    method: str
    backend: str
    seed: int
    noise: float = 0.0
    label: str = ""
    preference: str = toy_world.PREFERRED
    oracle: bool = False
    rates: list[float] = field(default_factory=list)  # index = update (0 = before any update)
    rates_unseen: list[float] = field(default_factory=list)  # the same on the topics never asked
    fidelity: list[float] = field(default_factory=list)  # well-formed answers about the asked topic
    fidelity_unseen: list[float] = field(default_factory=list)
    distinct: list[float] = field(default_factory=list)  # distinct answers / answers, per topic
    served_rates: list[float] = field(default_factory=list)  # the same through the serving selection
    served_after_hint: float | None = None  # served by Best-of-N, base model, once the user gave one hint
    first_ok: list[bool] = field(default_factory=list)  # per conversation: the served first answer was right
    conversations: list[int] = field(default_factory=list)  # conversations used when each point was taken
    turns: list[int] = field(default_factory=list)
    online_first_ok: list[float | None] = field(default_factory=list)  # training conversations, per update
    trainer_metrics: list[dict] = field(default_factory=list)
    policy_version: int = 0
    samples_used: int = 0
    stopped_early: bool = False  # the conversation budget ran out before the last update
    seconds: float = 0.0


def row_settings(spec: Row, settings: BenchSettings) -> BenchSettings:
    """The benchmark settings of one run of ``spec``: its own preference and number of updates."""
    return dataclasses.replace(
        settings, preferred=spec.preference, updates=settings.updates * spec.update_factor
    )


KEY_DEFAULTS = {"loss_type": "grpo", "group_std_floor": 0.0, "group_entropy_coef": 0.0}
"""Settings left out of a run's cache key at these values (what runs cached before the setting existed used)."""


def row_key(settings: BenchSettings):
    """The cache key of a row's runs: its settings (all but the sample timeout) and its definition."""

    def key(row: str) -> dict:
        recipe = asdict(row_settings(ROWS[row], settings))
        recipe.pop("sample_timeout_s")
        for name, value in KEY_DEFAULTS.items():
            if recipe.get(name) == value:
                recipe.pop(name)
        return {"settings": recipe, "row": asdict(ROWS[row])}

    return key


def plan(
    rows: list[str], noises: list[float], seeds: list[int]
) -> tuple[list[tuple[str, float, int]], list[str]]:
    """The (row, noise, seed) runs to make, noise level by noise level (all of p = 0 first), and why
    the others are skipped."""
    skipped = []
    if any(noises):
        skipped += [
            f"{n} at p > 0: the feedback backend has no rule judge to add noise to"
            for n in rows
            if ROWS[n].backend != "callable"
        ]
    runs = [
        (name, noise, seed)
        for noise in noises
        for seed in seeds
        for name in rows
        if (ROWS[name].backend == "callable" or not noise)
        and (seed == seeds[0] or not ROWS[name].first_seed_only)
    ]
    return runs, skipped
