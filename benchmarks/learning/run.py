"""Closed-loop learning benchmark: does the agent learn the user's hidden preference by talking to it?

    python benchmarks/learning/run.py            # 3 methods x 5 seeds + one feedback-backend run
    python benchmarks/learning/run.py --quick    # 1 seed, 8 updates: a smoke run in 1-2 minutes

Everything goes through the real serving path, wired by ``openclaw_trl.runtime``: the OpenAI-compatible
server over HTTP (session headers), the store, the turn collector, the background scorer (``callable``
backend with ``simulation.rule_judge``, or the ``feedback`` backend fed by ``POST /v1/feedback``) and
``OpenClawTrainer`` publishing each LoRA update to the engine the server samples from. The simulated user
(``openclaw_trl.toy.world.make_user``) prefers bulleted answers; the model (``openclaw_trl.toy``) answers
in one of four styles at random unless told.

Protocol (why it is built this way):

* Same starting checkpoint, same seed set for every method; ``batch_size`` judged samples per update,
  ``updates`` updates. The user talks in lock-step with the trainer: conversations run only while the next
  batch is incomplete, so (up to one conversation's overshoot) every batch is sampled by the policy it
  trains; RL, OPD and Combine differ only in which turns become samples and in the advantage.
* A run also has a conversation budget (``max_conversations``). OPD only learns from turns the user
  corrected, so the better it gets the more conversations one batch costs (at 97% it is ~30 per sample);
  when the budget is spent the run ends early and its later points are missing (the summary says so).
* Metric: after every update (and before the first), a fixed evaluation set of openings
  ("Tell me about <topic>." x ``eval_per_topic`` per topic) is answered **by the engine with the current
  policy adapter** (``weights="policy"``, not through the API, so evaluation turns never enter the
  store), sampled at the serving temperature with fixed per-prompt seeds (the same random numbers at
  every evaluation, which removes most sampling noise from the *differences* between points). The score
  is the fraction of first answers in the preferred style. Update 0 is the base model's rate.
* Also recorded per update: conversations and turns used so far (the interaction count), the online
  first-answer success rate of the training conversations, and the trainer's metrics (reward, hint
  acceptance, OPD advantage, clip ratios, KL to the sampling policy).

Output: ``benchmarks/results/learning.json`` (all runs, curves, trainer metrics; git-ignored),
``benchmarks/results/learning.png`` (the curves) and ``benchmarks/results/learning_summary.md`` (the
table the README quotes). Server-side sampling is not seeded (as in live use), so reruns differ a little.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from openclaw_trl.toy import pretrain
from openclaw_trl.toy import world as toy_world

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
METHODS = ("rl", "opd", "combine")
RULE_JUDGE = "openclaw_trl.simulation:rule_judge"
log = logging.getLogger("learning-bench")


@dataclass
class BenchSettings:
    """The benchmark recipe (not the library defaults): tuned for this world on a 2-core CPU."""

    updates: int = 16
    batch_size: int = 8
    learning_rate: float = 1e-3
    lora_r: int = 8
    lora_alpha: int = 16
    num_iterations: int = 1
    w_rl: float = 1.0  # Combine's weights (the library defaults); rl / opd force one of them to 0
    w_opd: float = 1.0
    temperature: float = 1.0
    max_tokens: int = 40
    eval_per_topic: int = 8
    eval_seed: int = 777
    preferred: str = toy_world.PREFERRED
    max_conversations: int = 480  # per run: OPD learns from failures only, so it needs ever more talk
    sample_timeout_s: float = 600.0


@dataclass
class RunResult:
    method: str
    backend: str
    seed: int
    rates: list[float] = field(default_factory=list)  # index = update (0 = before any update)
    conversations: list[int] = field(default_factory=list)  # conversations used when each point was taken
    turns: list[int] = field(default_factory=list)
    online_first_ok: list[float | None] = field(default_factory=list)  # training conversations, per update
    trainer_metrics: list[dict] = field(default_factory=list)
    policy_version: int = 0
    samples_used: int = 0
    stopped_early: bool = False  # the conversation budget ran out before the last update
    seconds: float = 0.0


# ---------------------------------------------------------------------------------------------- evaluation
def eval_prompts(settings: BenchSettings) -> list[list[dict]]:
    return [
        [{"role": "user", "content": toy_world.opening(topic)}]
        for topic in toy_world.TOPICS
        for _ in range(settings.eval_per_topic)
    ]


def evaluate(engine, settings: BenchSettings) -> float:
    """Fraction of first answers in the preferred style (policy adapter, serving temperature, fixed seeds)."""
    prompts = eval_prompts(settings)
    out = pretrain.style_rates(
        engine,
        prompts,
        [settings.preferred] * len(prompts),
        settings.temperature,
        seed=settings.eval_seed,
        max_tokens=settings.max_tokens,
    )
    return out["rate"]


# ---------------------------------------------------------------------------------------------- the user
class LockstepUser:
    """Drives conversations over HTTP while the trainer waits for its next batch, then pauses.

    After each conversation it wakes the scorer and waits until every ready turn is judged, so the count
    of waiting samples is exact when it decides whether the batch is full.
    """

    def __init__(self, runtime, url: str, settings: BenchSettings, seed: int, feedback: bool):
        self.runtime, self.url, self.settings, self.seed, self.feedback = (
            runtime,
            url,
            settings,
            seed,
            feedback,
        )
        self.gate = threading.Event()  # set = the trainer is waiting: talk
        self.stop = threading.Event()
        self.exhausted = threading.Event()  # the conversation budget is spent: the trainer must stop
        self.conversations = 0
        self.turns = 0
        self.first_ok: list[bool] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="lockstep-user", daemon=True)

    def _converse(self) -> list:
        from openclaw_trl.simulation import FeedbackUser, run_conversations, run_feedback_conversations

        kwargs = dict(
            seed=self.seed * 1_000_003 + self.conversations,
            max_tokens=self.settings.max_tokens,
            model=self.runtime.config.served_model_name,
            should_stop=self.stop.is_set,
        )
        if self.feedback:
            user = FeedbackUser(
                preferred=self.settings.preferred, styles=toy_world.STYLES, topics=toy_world.TOPICS
            )
            return run_feedback_conversations(self.url, user, 1, session_prefix="fb", **kwargs)
        user = toy_world.make_user(self.settings.preferred)
        return run_conversations(self.url, user, 1, session_prefix="sim", **kwargs)

    def _settle(self) -> None:
        store, scorer = self.runtime.store, self.runtime.scorer
        deadline = time.monotonic() + 60
        while store.count_ready() > 0 and time.monotonic() < deadline and not self.stop.is_set():
            scorer.wake()
            time.sleep(0.01)

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.gate.wait(0.1):
                    continue
                if self.conversations >= self.settings.max_conversations:
                    self.exhausted.set()
                    self.gate.clear()
                    continue
                for conversation in self._converse():
                    self.conversations += 1
                    self.turns += conversation.turns
                    self.first_ok.append(conversation.first_reply_satisfied)
                self._settle()
                if self.runtime.store.count_waiting() >= self.settings.batch_size:
                    self.gate.clear()
        except BaseException as exc:  # noqa: BLE001 - reported by run_one
            self.error = exc
            log.exception("simulated user failed")

    def start(self) -> LockstepUser:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.gate.set()
        self.thread.join(timeout=60)


class BudgetExhausted(RuntimeError):
    """The simulated user's conversation budget ran out while the trainer waited for a batch."""


class _BudgetedQueue:
    """The trainer's view of the store: the same samples, but a wait for a batch ends (with
    :class:`BudgetExhausted`) once the user has stopped talking, instead of blocking forever."""

    def __init__(self, store, exhausted: threading.Event):
        self._store, self._exhausted = store, exhausted

    def wait_for_samples(self, n: int, timeout: float | None = None, poll: float = 0.2, **staleness):
        while True:
            try:
                return self._store.wait_for_samples(n, timeout=1.0, poll=poll, **staleness)
            except TimeoutError:
                if self._exhausted.is_set() and self._store.count_waiting() < n:
                    raise BudgetExhausted(
                        f"conversation budget spent with {n} samples still needed"
                    ) from None

    def __getattr__(self, name):
        return getattr(self._store, name)


def _probe_callback(runtime, user: LockstepUser, settings: BenchSettings, result: RunResult):
    """A trainer callback: evaluate the just-published policy, record the counters, release the user."""
    from transformers import TrainerCallback

    class Probe(TrainerCallback):
        seen_online = 0

        def _point(self) -> None:
            result.rates.append(evaluate(runtime.engine, settings))
            result.conversations.append(user.conversations)
            result.turns.append(user.turns)
            new = user.first_ok[self.seen_online :]
            self.seen_online = len(user.first_ok)
            result.online_first_ok.append(sum(new) / len(new) if new else None)
            log.info(
                "%s/%s seed %d: update %d rate %.3f (conversations %d)",
                result.method,
                result.backend,
                result.seed,
                len(result.rates) - 1,
                result.rates[-1],
                user.conversations,
            )

        def on_train_begin(self, args, state, control, **kwargs):
            self._point()  # runs after the trainer's own callback published version 0
            user.gate.set()

        def on_step_end(self, args, state, control, **kwargs):
            self._point()
            user.gate.set()

    return Probe()


# ---------------------------------------------------------------------------------------------- one run
def build_config(method: str, seed: int, settings: BenchSettings, out_dir: Path, backend: str, model_dir):
    from trl import ModelConfig

    from openclaw_trl.config import OpenClawConfig

    config = OpenClawConfig(
        output_dir=str(out_dir),
        method=method,
        batch_size=settings.batch_size,
        per_device_train_batch_size=settings.batch_size,
        num_iterations=settings.num_iterations,
        learning_rate=settings.learning_rate,
        w_rl=settings.w_rl,
        w_opd=settings.w_opd,
        temperature=settings.temperature,
        max_completion_length=settings.max_tokens,
        max_steps=settings.updates,
        judge_backend=backend,
        judge_callable=RULE_JUDGE if backend == "callable" else None,
        teacher="base",
        source="simulated",
        engine="hf",
        engine_max_batch_size=64,
        session_idle_timeout=3600,
        save_strategy="no",
        adapter_history=0,
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        seed=seed,
    )
    model_args = ModelConfig(
        model_name_or_path=str(model_dir),
        dtype="float32",
        use_peft=True,
        lora_r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=0.0,
    )
    return config, model_args


TRAINER_KEYS = (
    "reward",
    "opd/hint_accept_rate",
    "opd/mean_advantage",
    "opd/mean_abs_advantage",
    "advantages/mean",
    "loss",
    "kl_old",
    "clip_ratio/region_mean",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "samples/staleness",
    "entropy",
    "grad_norm",
)


def run_one(
    model_dir, method: str, seed: int, settings: BenchSettings, out_dir: Path, backend: str = "callable"
) -> RunResult:
    """One training run from the checkpoint in ``model_dir``; returns its curve and counters."""
    from transformers import set_seed

    from openclaw_trl.runtime import build_runtime, start_server

    started = time.perf_counter()
    set_seed(seed)
    config, model_args = build_config(method, seed, settings, out_dir, backend, model_dir)
    runtime = build_runtime(config, model_args)
    result = RunResult(method=method, backend=backend, seed=seed)
    user = None
    try:
        from transformers.trainer_callback import PrinterCallback

        runtime.trainer.remove_callback(PrinterCallback)  # metrics go to the JSON, not the terminal
        runtime.trainer.sample_timeout = settings.sample_timeout_s
        runtime.scorer.start()
        server = start_server(runtime, port=0, ui=False)
        user = LockstepUser(runtime, server.url, settings, seed, feedback=backend == "feedback").start()
        runtime.trainer.store = _BudgetedQueue(runtime.store, user.exhausted)
        runtime.trainer.add_callback(_probe_callback(runtime, user, settings, result))
        try:
            runtime.trainer.train()
        except BudgetExhausted:
            result.stopped_early = True
            log.info(
                "%s seed %d: conversation budget spent after %d updates", method, seed, len(result.rates) - 1
            )
    finally:
        if user is not None:
            user.close()
        runtime.stop_event.set()
        runtime.close()
    if user is not None and user.error is not None:
        raise RuntimeError(f"the simulated user failed: {user.error!r}") from user.error
    result.policy_version = runtime.trainer.state.global_step
    result.samples_used = runtime.trainer.samples_used
    result.trainer_metrics = [
        {k: e[k] for k in TRAINER_KEYS if k in e} | {"step": e.get("step")}
        for e in runtime.trainer.state.log_history
        if "reward" in e
    ]
    result.seconds = round(time.perf_counter() - started, 1)
    return result


# ---------------------------------------------------------------------------------------------- summary
def aggregate(runs: list[RunResult]) -> dict:
    """Per update: mean, min, max and standard deviation of the rate over the seeds that reached it (``n``;
    a run whose conversation budget ran out stops early); mean conversations used by then."""
    out = {"mean": [], "min": [], "max": [], "std": [], "n": [], "conversations": []}
    for i in range(max(len(r.rates) for r in runs)):
        reached = [r for r in runs if len(r.rates) > i]
        values = [r.rates[i] for r in reached]
        out["mean"].append(statistics.fmean(values))
        out["min"].append(min(values))
        out["max"].append(max(values))
        out["std"].append(statistics.pstdev(values) if len(values) > 1 else 0.0)
        out["n"].append(len(values))
        out["conversations"].append(statistics.fmean(r.conversations[i] for r in reached))
    return out


def rate_after_conversations(run: dict, budget: int) -> float | None:
    """The rate of the policy being served once ``budget`` conversations were held: the last evaluation
    taken with at most that many conversations used (None when the run ended before reaching it)."""
    if run["conversations"][-1] < budget and not run["stopped_early"]:
        return None
    return [r for r, c in zip(run["rates"], run["conversations"]) if c <= budget][-1]


def equal_interactions(report: dict, budgets: tuple[int, ...]) -> dict[str, list[float | None]]:
    """Per group: the mean over seeds of :func:`rate_after_conversations` at each budget."""
    groups: dict[str, list[dict]] = {}
    for run in report["runs"]:
        name = run["method"] if run["backend"] == "callable" else f"{run['method']} ({run['backend']})"
        groups.setdefault(name, []).append(run)
    out = {}
    for name, runs in groups.items():
        row = []
        for budget in budgets:
            values = [rate_after_conversations(r, budget) for r in runs]
            row.append(None if any(v is None for v in values) else statistics.fmean(values))
        out[name] = row
    return out


def conversation_budgets(report: dict) -> tuple[int, ...]:
    """Three interaction counts every completed run reached (a quarter, half and all of the smallest)."""
    completed = [r["conversations"][-1] for r in report["runs"] if not r["stopped_early"]]
    top = (
        max(5, 5 * (min(completed) // 5)) if completed else 5 * (report["settings"]["max_conversations"] // 5)
    )
    return tuple(sorted({max(5, 5 * round(top / 20)), max(5, 5 * round(top / 10)), top}))


def checkpoints(updates: int) -> list[int]:
    return sorted({u for u in (0, 4, 8, 16, updates) if u <= updates})


def summary_markdown(report: dict) -> str:
    s, agg = report["settings"], report["aggregate"]
    pre = report["pretrain"]["metrics"]
    points = checkpoints(s["updates"])
    lines = [
        "# Learning benchmark: results",
        "",
        f"`python benchmarks/learning/run.py{' --quick' if report['quick'] else ''}` on this machine: "
        f"{report['seconds'] / 60:.1f} min ({len(report['seeds'])} seed(s): {report['seeds']}; "
        f"batch {s['batch_size']}, {s['updates']} updates, lr {s['learning_rate']}, LoRA r {s['lora_r']}, "
        f"T {s['temperature']}).",
        "",
        f"Pre-trained model ({report['pretrain']['parameters'] / 1e6:.2f}M parameters): "
        f"P(preferred style) bare {pre['bare']['rate']:.2f}, with the hint block {pre['hinted']['rate']:.2f}, "
        f"follow-up compliance {pre['follow_up']['rate']:.2f}.",
        "",
        "Fraction of first answers in the preferred style (evaluation set of "
        f"{len(toy_world.TOPICS) * s['eval_per_topic']} openings, policy adapter, T={s['temperature']}), "
        "mean ± std over seeds [min, max]; conversations used in brackets:",
        "",
        "| method | " + " | ".join(f"update {u}" for u in points) + " |",
        "| --- | " + " | ".join("---" for _ in points) + " |",
    ]
    for name, a in agg.items():
        cells = [
            (
                f"{a['mean'][u]:.2f} ± {a['std'][u]:.2f} [{a['min'][u]:.2f}, {a['max'][u]:.2f}] "
                f"({a['conversations'][u]:.0f})" + (f" n={a['n'][u]}" if a["n"][u] != a["n"][0] else "")
            )
            if u < len(a["mean"])
            else "budget spent"
            for u in points
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    gap = pre.get("teacher_gap", {})
    lines += [
        "",
        f"Base model rate (update 0, all runs): {report['base_rate']:.3f}. "
        "`budget spent`: every seed ran out of its conversation budget "
        f"({s['max_conversations']}) before that update; `n=` counts the seeds that got there.",
    ]
    if gap:
        lines.append(
            "Teacher - student log-prob of a sampled bare answer (summed over its tokens, the OPD advantage): "
            f"{gap['preferred_style']:+.2f} for answers in the preferred style, "
            f"{gap['other_styles']:+.2f} for the others."
        )
    budgets = conversation_budgets(report)
    rows = equal_interactions(report, budgets)
    lines += [
        "",
        "At equal interactions: the rate of the policy being served after N conversations (mean over seeds):",
        "",
        "| method | " + " | ".join(f"{b} conversations" for b in budgets) + " |",
        "| --- | " + " | ".join("---" for _ in budgets) + " |",
    ]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in row) + " |")
    lines += ["", "Interpretation: README.md, section on the learning benchmark.", ""]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """Draw the curves to ``path``; without matplotlib (the dev extra) say so and draw nothing."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no plot at {path} (pip install matplotlib)")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, a in report["aggregate"].items():
        x = list(range(len(a["mean"])))
        style = "--" if "feedback" in name else "-"
        (line,) = left.plot(x, a["mean"], style, marker="o", ms=3, label=name)
        left.fill_between(x, a["min"], a["max"], color=line.get_color(), alpha=0.15)
        right.plot(a["conversations"], a["mean"], style, marker="o", ms=3, color=line.get_color(), label=name)
    for ax in (left, right):
        ax.axhline(report["base_rate"], color="grey", lw=0.8, ls=":", label="base model")
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("first answers in the preferred style")
        ax.grid(alpha=0.3)
    finals = sorted(a["conversations"][-1] for a in report["aggregate"].values())
    if finals and finals[-1] > 2.5 * finals[0] > 0:  # OPD's long tail would squash the others
        right.set_xlim(0, 2.5 * finals[0])
    left.set_xlabel("updates (band: min-max over seeds)")
    right.set_xlabel("conversations with the simulated user (mean over seeds)")
    left.legend(fontsize=8, loc="lower right")
    fig.suptitle("Toy world: learning a hidden style preference from conversation (CPU)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- main
def run_benchmark(
    model_dir,
    settings: BenchSettings,
    seeds: list[int],
    methods: tuple[str, ...] = METHODS,
    feedback_run: bool = True,
    work_dir: Path | None = None,
) -> dict:
    """Every (method, seed) run, plus one Combine run with the feedback backend; returns the report."""
    import tempfile

    started = time.perf_counter()
    work_dir = Path(work_dir or tempfile.mkdtemp(prefix="learning-bench-"))
    runs: list[RunResult] = []
    plan = [(m, s, "callable") for s in seeds for m in methods]
    if feedback_run:
        plan.append(("combine", seeds[0], "feedback"))
    for i, (method, seed, backend) in enumerate(plan):
        log.info("run %d/%d: %s, seed %d, %s backend", i + 1, len(plan), method, seed, backend)
        result = run_one(model_dir, method, seed, settings, work_dir / f"{method}-{backend}-{seed}", backend)
        log.info("  done in %.0fs: rates %s", result.seconds, [round(r, 2) for r in result.rates])
        runs.append(result)
    groups: dict[str, list[RunResult]] = {}
    for r in runs:
        groups.setdefault(r.method if r.backend == "callable" else f"{r.method} (feedback)", []).append(r)
    return {
        "settings": asdict(settings),
        "seeds": seeds,
        "methods": list(methods),
        "runs": [asdict(r) for r in runs],
        "aggregate": {name: aggregate(rs) for name, rs in groups.items()},
        "base_rate": statistics.fmean(r.rates[0] for r in runs),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 8 updates: a smoke run (~1-2 min)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--updates", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--max-conversations", type=int, default=None, help="per run (budget)")
    parser.add_argument("--w-rl", type=float, default=None, help="Combine's reward weight (ablations)")
    parser.add_argument("--w-opd", type=float, default=None, help="Combine's OPD weight (ablations)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--no-feedback-run", action="store_true")
    parser.add_argument("--model-dir", default=None, help="default: the toy model in the user cache")
    parser.add_argument("--out", default=str(RESULTS), help="where learning.json / .png / _summary.md go")
    parser.add_argument("--from-json", default=None, help="only redraw the plot and summary of a saved run")
    args = parser.parse_args(argv)
    if args.from_json:
        path = Path(args.from_json)
        report = json.loads(path.read_text())
        plot(report, path.with_suffix(".png"))
        summary = summary_markdown(report)
        path.with_name(path.stem + "_summary.md").write_text(summary)
        print(summary)
        return 0

    import torch

    torch.set_num_threads(1)  # a shared 2-core machine: one thread is several times faster than two
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "openclaw_trl", "transformers", "trl", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    started = time.perf_counter()
    settings = BenchSettings()
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2, 3, 4])
    if args.quick:
        settings.updates, settings.eval_per_topic = 8, 4
    settings.updates = args.updates or settings.updates
    settings.batch_size = args.batch_size or settings.batch_size
    settings.learning_rate = args.learning_rate or settings.learning_rate
    settings.max_conversations = args.max_conversations or settings.max_conversations
    settings.w_rl = settings.w_rl if args.w_rl is None else args.w_rl
    settings.w_opd = settings.w_opd if args.w_opd is None else args.w_opd

    if args.model_dir:
        model_dir = pretrain.pretrain(args.model_dir, log=log.info, progress=True)
    else:
        model_dir = pretrain.toy_model(log=log.info)
    report = run_benchmark(model_dir, settings, seeds, tuple(args.methods), not args.no_feedback_run)
    report["quick"] = args.quick
    report["pretrain"] = json.loads((Path(model_dir) / pretrain.META_FILE).read_text())
    report["seconds"] = round(time.perf_counter() - started, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    (out / f"learning{suffix}.json").write_text(json.dumps(report, indent=2))
    plot(report, out / f"learning{suffix}.png")
    summary = summary_markdown(report)
    (out / f"learning{suffix}_summary.md").write_text(summary)
    print(summary)
    print(f"run time: {report['seconds']:.0f}s; wrote {out}/learning{suffix}.json, .png, _summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
