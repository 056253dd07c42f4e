"""Closed-loop learning benchmark: does the agent learn the user's hidden preference by talking to it?

    python benchmarks/learning/run.py                        # the default rows x 5 seeds, judge noise 0 and 0.2
    python benchmarks/learning/run.py --judge-noise 0.2      # ... judge noise 0.2 only
    python benchmarks/learning/run.py --methods rl opd combine+baseline --judge-noise 0 0.2   # add rows
    python benchmarks/learning/run.py --quick                # 1 seed, 8 updates: ~1 min
    python benchmarks/learning/run.py --smoke                # a few-second model, 2 updates of 2: that it runs

Everything goes through the real serving path, wired by ``openclaw_trl.runtime``: the OpenAI-compatible
server over HTTP (session headers), the store, the turn collector, the background scorer (``callable``
backend with the rule judge, or the ``feedback`` backend fed by ``POST /v1/feedback``) and
``OpenClawTrainer`` publishing each LoRA update to the engine the server samples from. The simulated user
(``openclaw_trl.toy.world.make_user``) has a hidden preference (``world.preference``): bulleted answers,
brief answers (one fact), or both; the model (``openclaw_trl.toy``) answers in one of four styles and with
one to three facts at random unless told.

Rows (``--methods``, :data:`ROWS`; :data:`DEFAULT_ROWS` without it). No row but the one marked ``oracle``
lets any judge read the user's hidden preference: the judge sees the conversation and the user's next
message, the quick judges the conversation, the candidate and the hints in the store.

* ``combine``: Combine (RL + OPD), one sample per turn.
* ``combine+bo4+memory``: Combine with ``best_of_n: 4`` and the ``memory`` quick judge: each candidate's
  log-likelihood gain under the user's recent hints (what the judge extracted from earlier corrections);
  no hint yet, candidate 0 is served.
* ``combine+bo4+engine``: the same with the ``engine`` quick judge (the model rates each candidate 0-10;
  the toy model cannot rate, so its scores are empty and candidate 0 is served: the row shows what a
  quick judge that cannot judge costs).
* ``combine+bo4+proxy`` (**oracle**, an upper bound): the quick judge is ``openclaw_trl.toy.proxy``, told the
  hidden preference and right with probability 0.7. No real quick judge knows the preference.
* ``combine-brief``, ``combine+bo4+memory-brief``: a user who wants brief answers (one fact);
  ``combine-both``, ``combine+bo4+memory-both``: bulleted and brief.
* ``rl``, ``opd``, ``combine+baseline`` (Combine with ``advantage_baseline: session_mean``),
  ``combine+feedback`` (the ``feedback`` backend: 👍/👎 and the correction through ``POST /v1/feedback``,
  first seed only, no judge noise): the method comparison.

Protocol (why it is built this way):

* Same starting checkpoint, same seed set for every row; ``batch_size`` judged samples per update,
  ``updates`` updates. The user talks in lock-step with the trainer (``lockstep.py``): conversations run
  only while the next batch is incomplete, so (up to one conversation's overshoot) every batch is sampled
  by the policy it trains; the rows differ only in which turns become samples, the advantage and (Best-of-N)
  which reply is served.
* A run also has a conversation budget (``max_conversations``). OPD only learns from turns the user
  corrected, so the better it gets the more conversations one batch costs (at 97% it is ~30 per sample);
  when the budget is spent the run ends early and its later points are missing (the summary says so).
* Judge noise (``--judge-noise p``): the rule judge (``openclaw_trl.simulation.NoisyRuleJudge``) flips its
  verdict and garbles its hint (replaced by another preference's request: a wrong instruction) on a fraction p
  of the turns, drawn per turn from the run's seed, so a rerun judges the same turn ids the same way.
* Metric: after every update (and before the first), a fixed evaluation set of openings
  ("Tell me about <topic>." x ``eval_per_topic`` for every topic) is answered **by the engine with the
  current policy adapter** (``weights="policy"``, not through the API, so evaluation turns never enter the
  store), sampled at the serving temperature with fixed per-prompt seeds (the same random numbers at every
  evaluation, which removes most sampling noise from the *differences* between points). The score is the
  fraction of answers that satisfy the preference. The user asks about six of the eight topics while
  learning; the evaluation covers all eight and also reports the two held out (``rates_unseen``). What must
  not change is measured at the same points: content fidelity (``world.answer_fidelity``: a well-formed
  answer about the asked topic stating its facts; ``fidelity``, ``fidelity_unseen``) and a collapse figure
  (``distinct``: distinct answers / answers per topic). Update 0 is the base model.
* Served answers: for a Best-of-N row the user is served the quick judge's pick, not one sample, so the
  same evaluation is also run through that selection (N samples per opening with seeds ``eval_seed + i +
  k * 100003``, the first of them the plain evaluation's; the row's own quick judge scores them, the
  memory judge with the run's hints at that point; the first best one counts): ``served_rates``. For N = 1
  rows it equals the score. ``served_after_hint``: the same with the base model and, for the memory judge,
  only the first hint the user gave: what a user is served before any update once they have corrected
  the model once.
* Stability: ``first_ok`` holds, per conversation, whether the first answer served was what the user
  wanted; the summary's "sessions until stable" is the number of conversations until three in a row were
  right and every evaluation of the policy from then on is >= 0.9.
* Also recorded per update: conversations and turns used so far (the interaction count), the online
  first-answer success rate of the training conversations, and the trainer's metrics (reward, hint
  acceptance, OPD advantage, baseline, clip ratios, KL to the sampling policy).

Output: every finished run is cached as ``benchmarks/results/learning_runs/<row>_p<noise>_s<seed>.json``
(committed: the raw results) and reused by later invocations with the same settings and model, so rows
can be added without rerunning the others (``--rerun`` runs them again). The report covers every cached
run: ``benchmarks/results/learning.json`` (git-ignored), ``learning_summary.json`` (committed: one entry per
row and noise level with conversations to 0.9, sessions until stable, fidelity drop, served before any
update, and the goals), ``learning.png`` (score per conversation, seed bands) and ``learning_summary.md`` (the
tables, generated from the JSON); the table between the ``learning-table`` markers of docs/benchmarks.md is rewritten
from the same JSON. ``--quick`` uses ``learning_runs_quick/`` and
``learning_quick.*`` (``--smoke``: ``learning_runs_smoke/``, ``learning_smoke.*``). Server-side sampling is
not seeded (as in live use), so reruns differ a little.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from cache import RunCache
from evaluation import LEARNING_TOPICS, evaluate, evaluate_served, proxy_scorer, quick_judge_scorer
from lockstep import BudgetExhausted, LockstepUser, budgeted_store, probe_callback
from options import bench_settings, parse_args
from report import RESULTS, ROOT, build_report, write_report  # noqa: F401 - also read as run.RESULTS, ...
from rows import (  # noqa: F401 - the row table and settings, also read as run.ROWS, run.BenchSettings, ...
    DEFAULT_ROWS,
    LABELS,
    PROXY_JUDGE,
    ROWS,
    RULE_JUDGE,
    BenchSettings,
    Row,
    RunResult,
    bo4,
    plan,
    preference_rows,
    row_key,
    row_settings,
)
from summary import plot, summary_markdown  # noqa: F401 - also read as run.plot, run.summary_markdown

from openclaw_trl.toy import pretrain
from openclaw_trl.toy import world as toy_world

log = logging.getLogger("learning-bench")


# ---------------------------------------------------------------------------------------------- one run
def build_config(row: Row, seed: int, settings: BenchSettings, out_dir: Path, model_dir):
    from trl import ModelConfig

    from openclaw_trl.config import OpenClawConfig

    fields = dict(
        output_dir=str(out_dir),
        method=row.method,
        batch_size=settings.batch_size,
        per_device_train_batch_size=settings.batch_size,
        num_iterations=settings.num_iterations,
        learning_rate=settings.learning_rate,
        max_grad_norm=settings.max_grad_norm,
        optim=settings.optim,
        adam_epsilon=settings.adam_epsilon,
        warmup_steps=settings.warmup_steps,
        weight_decay=settings.weight_decay,
        lr_scheduler_type=settings.lr_scheduler_type,
        beta=settings.beta,
        advantage_baseline=settings.advantage_baseline,
        loss_type=settings.loss_type,
        guard=settings.guard != "off",
        **(OBSERVE_ONLY if settings.guard == "observe" else {}),
        w_rl=settings.w_rl,
        w_opd=settings.w_opd,
        temperature=settings.temperature,
        max_completion_length=settings.max_tokens,
        max_steps=settings.updates,
        judge_backend=row.backend,
        judge_callable=RULE_JUDGE if row.backend == "callable" else None,
        teacher=settings.teacher,
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
    if dict(row.fields).get("best_of_n", 1) > 1:
        fields["group_std_floor"] = settings.group_std_floor
        fields["group_entropy_coef"] = settings.group_entropy_coef
    config = OpenClawConfig(**(fields | dict(row.fields)))  # a row's own fields win (combine+baseline)
    model_args = ModelConfig(
        model_name_or_path=str(model_dir),
        dtype="float32",
        use_peft=True,
        lora_r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=0.0,
    )
    return config, model_args


OBSERVE_ONLY = {
    "guard_max_kl": 1e9,
    "guard_max_implausible": 1e9,
    "guard_max_entropy_drop": 1e9,
    "guard_max_entropy_rise": 1e9,
}
"""The guard's bounds of ``--guard observe``: every signal is measured and logged, no version is held back."""

TRAINER_KEYS = (
    "reward",
    "opd/hint_accept_rate",
    "opd/mean_advantage",
    "opd/mean_abs_advantage",
    "advantages/mean",
    "rl/baseline_mean",
    "loss",
    "kl_old",
    "clip_ratio/region_mean",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "samples/staleness",
    "entropy",
    "grad_norm",
    "best_of_n/score_mean",
    "best_of_n/served_score",
    "guard/held",
    "guard/kl",
    "guard/implausible",
    "guard/entropy_gap",
    "guard/seconds",
    "time/update_s",
)


def judge_for(spec: Row, noise: float, seed: int):
    """The judge a run of ``spec`` passes to ``build_runtime`` (None: the recipe's ``judge_callable``, the rule
    judge). Either way it reads the conversation and the user's next message only, never the preference."""
    from openclaw_trl.simulation import NoisyRuleJudge

    if noise and spec.backend != "callable":
        raise ValueError(f"{spec.name}: judge noise applies to the rule judge (callable backend) only")
    if not noise:
        return None
    return NoisyRuleJudge(noise=noise, seed=seed, decoys=tuple(c.request for c in toy_world.CRITERIA))


def served_scorer(spec: Row, runtime, seed: int, first_hint_only: bool = False):
    """How the evaluation scores Best-of-N candidates for ``spec``: its own quick judge. The memory judge reads
    the run's store (``first_hint_only``: only the first hint the user gave); the proxy is told the preference
    (an oracle row)."""
    from openclaw_trl.judging import make_quick_judge
    from openclaw_trl.judging.memory import HintMemory
    from openclaw_trl.toy.proxy import StyleProxy

    config = runtime.config.quick_judge_config()
    if spec.oracle:
        return proxy_scorer(StyleProxy(preferred=spec.preference, seed=seed))
    if first_hint_only:
        first = runtime.user.store.queries.recent_hints(1_000_000)[:1]
        tokenizer = runtime.engine.tokenizer
        judge = HintMemory(
            lambda n: first,
            runtime.engine,
            tokenizer,
            config.hints,
            config.teacher,
            config.max_prompt_tokens,
            60.0,
        )
    else:
        judge = make_quick_judge(
            config, engine=runtime.engine, tokenizer=runtime.engine.tokenizer, store=runtime.user.store
        )
    return quick_judge_scorer(judge, runtime.config.temperature)


def make_measure(spec: Row, runtime, settings: BenchSettings, seed: int, result: RunResult):
    """The evaluation at one point of a run (appends to ``result``'s curves); for Best-of-N rows also what
    the row serves, and (once) what it serves with the base model once the user has given a hint."""

    def measure() -> None:
        point = evaluate(runtime.engine, settings, spec.preference)
        result.rates.append(point.rate)
        result.rates_unseen.append(point.rate_unseen)
        result.fidelity.append(point.fidelity)
        result.fidelity_unseen.append(point.fidelity_unseen)
        result.distinct.append(point.distinct)
        served = point.rate
        if spec.best_of > 1:
            score = served_scorer(spec, runtime, seed)
            served = evaluate_served(
                runtime.engine, settings, spec.best_of, score, spec.preference, f"eval-{seed}"
            )
            if result.served_after_hint is None and (
                spec.quick_judge != "memory" or runtime.user.store.queries.recent_hints(1)
            ):
                if spec.quick_judge == "memory":
                    score = served_scorer(spec, runtime, seed, first_hint_only=True)
                result.served_after_hint = evaluate_served(
                    runtime.engine, settings, spec.best_of, score, spec.preference, f"eval-{seed}", "base"
                )
        result.served_rates.append(served)

    return measure


def run_one(
    model_dir, row: str, seed: int, settings: BenchSettings, out_dir: Path, noise: float = 0.0
) -> RunResult:
    """One training run of ``row`` (a :data:`ROWS` name) from the checkpoint in ``model_dir`` with judge
    noise ``noise``; returns its curves and counters."""
    from transformers import set_seed
    from transformers.trainer_callback import PrinterCallback

    from openclaw_trl.runtime import build_runtime, start_server

    spec = ROWS[row]
    settings = row_settings(spec, settings)
    started = time.perf_counter()
    set_seed(seed)
    config, model_args = build_config(spec, seed, settings, out_dir, model_dir)
    runtime = build_runtime(config, model_args, judge_fn=judge_for(spec, noise, seed))
    result = RunResult(
        row=row,
        method=spec.method,
        backend=spec.backend,
        seed=seed,
        noise=noise,
        label=spec.label,
        preference=spec.preference,
        oracle=spec.oracle,
    )
    measure = make_measure(spec, runtime, settings, seed, result)

    user = None
    try:
        runtime.user.trainer.remove_callback(PrinterCallback)  # metrics go to the JSON, not the terminal
        runtime.user.trainer.sample_timeout = settings.sample_timeout_s
        if settings.schedule == "live":
            runtime.user.scorer.start()  # lockstep: the user judges each turn itself (lockstep.py)
        server = start_server(runtime, port=0, ui=False)
        feedback = spec.backend == "feedback"
        user = LockstepUser(
            runtime.user, server.url, settings, seed, feedback, LEARNING_TOPICS, schedule=settings.schedule
        ).start()
        runtime.user.trainer.store = budgeted_store(runtime.user.store, user)
        runtime.user.trainer.add_callback(probe_callback(user, result, measure))
        try:
            runtime.user.trainer.train()
        except BudgetExhausted:
            result.stopped_early = True
            log.info(
                "%s seed %d: conversation budget spent after %d updates", row, seed, len(result.rates) - 1
            )
    finally:
        if user is not None:
            user.close()
        runtime.stop_event.set()
        runtime.close()
    if user is not None and user.error is not None:
        raise RuntimeError(f"the simulated user failed: {user.error!r}") from user.error
    result.first_ok = list(user.first_ok) if user is not None else []
    result.policy_version = runtime.user.trainer.state.global_step
    result.samples_used = runtime.user.trainer.samples_used
    result.trainer_metrics = [
        {k: e[k] for k in TRAINER_KEYS if k in e} | {"step": e.get("step")}
        for e in runtime.user.trainer.state.log_history
        if "reward" in e
    ]
    result.seconds = round(time.perf_counter() - started, 1)
    return result


# ---------------------------------------------------------------------------------------------- main
def run_benchmark(
    model_dir, settings: BenchSettings, seeds, rows, noises, cache: RunCache, rerun=False, work_dir=None
) -> dict:
    """Every planned run not already in ``cache`` (all of them with ``rerun``); returns the report over
    every cached run."""
    import tempfile

    work_dir = Path(work_dir or tempfile.mkdtemp(prefix="learning-bench-"))
    todo, skipped = plan(rows, noises, seeds)
    for reason in skipped:
        print(f"skipped: {reason}")
    for i, (row, noise, seed) in enumerate(todo):
        if not rerun and cache.get(row, noise, seed) is not None:
            log.info("run %d/%d: %s p=%g seed %d: cached", i + 1, len(todo), row, noise, seed)
            continue
        log.info("run %d/%d: %s p=%g seed %d", i + 1, len(todo), row, noise, seed)
        result = run_one(model_dir, row, seed, settings, work_dir / f"{row}-p{noise:g}-{seed}", noise)
        log.info("  done in %.0fs: rates %s", result.seconds, [round(r, 2) for r in result.rates])
        cache.put(result)
    return build_report(cache.runs(list(ROWS)), settings, skipped)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.splitlines()[0])
    if args.from_json:
        path = Path(args.from_json)
        print(write_report(json.loads(path.read_text()), path.parent, path.stem))
        return 0

    import torch

    torch.set_num_threads(1)  # a shared 2-core machine: one thread is several times faster than two
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "openclaw_trl", "transformers", "trl", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    settings = bench_settings(args)
    seeds = args.seeds or ([0] if args.quick or args.smoke else [0, 1, 2, 3, 4])
    model_settings = pretrain.TINY if args.smoke else pretrain.PretrainSettings()
    if args.model_dir:
        model_dir = pretrain.pretrain(args.model_dir, model_settings, log=log.info, progress=True)
    else:
        model_dir = pretrain.toy_model(model_settings, log=log.info)
    suffix = "_smoke" if args.smoke else "_quick" if args.quick else ""
    suffix += "_live" if args.schedule == "live" else ""
    out = Path(args.out)
    cache = RunCache(Path(args.cache_dir or out / f"learning_runs{suffix}"), model_dir, row_key(settings))
    if args.report_only:
        _, skipped = plan(args.methods, args.judge_noise, seeds)
        if not cache.runs(list(ROWS)):
            print(f"no cached runs in {cache.directory} for these settings and this model")
            return 1
        report = build_report(cache.runs(list(ROWS)), settings, skipped)
    else:
        report = run_benchmark(model_dir, settings, seeds, args.methods, args.judge_noise, cache, args.rerun)
    report["quick"] = args.quick
    report["smoke"] = args.smoke
    report["command"] = " ".join(
        ["python benchmarks/learning/run.py", *(argv if argv is not None else sys.argv[1:])]
    )
    report["pretrain"] = json.loads((Path(model_dir) / pretrain.META_FILE).read_text())
    summary = write_report(report, out, f"learning{suffix}")
    print(summary)
    print(f"wrote {out}/learning{suffix}.json, .png, _summary.md; runs cached in {cache.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
