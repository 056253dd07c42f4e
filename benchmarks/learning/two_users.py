"""Two users, one base model: does each user's adapter learn their own preference and nothing of the other's?

    python benchmarks/learning/two_users.py                  # 1 seed, 48 updates per user (~5-10 min, 2 cores)
    python benchmarks/learning/two_users.py --seeds 0 1      # two seeds
    python benchmarks/learning/two_users.py --seeds 2 --append   # add a seed to the report in --out
    python benchmarks/learning/two_users.py --smoke          # the tiny toy model, 1 update each: that it runs

One run of ``recipes/toy_two_users.yaml`` (``users``: alice wants bulleted answers, bob brief ones, as the
recipe's ``simulated_user`` of each says) with the learning benchmark's best settings without an oracle
(``run.py``'s ``combine+bo4+memory`` row: Combine, Best-of-4 with the ``memory`` quick judge, ``scale_rewards:
group``, the benchmark's optimizer and baseline (``run.BenchSettings``), LoRA r 8, batches of 8, judge noise 0),
for :data:`UPDATES`
updates per user. Everything goes through the run of a recipe with users (``openclaw_trl.runtime``): one engine
serving both adapters, one shared copy of the base weights, one training thread per user taking turns on
the device, each user's store, scorer and Best-of-N picker; each simulated user talks to the one server with
their own bearer key, paced as in ``run.py`` (``lockstep.py``: a user talks only while their trainer waits
for its next batch, so each batch is sampled by the adapter it trains).

Metric (``evaluation.py``, the learning benchmark's evaluation): after every update of a user, their adapter
(``AdapterView(engine, name)``) answers the fixed evaluation openings, and the same answers are scored
against *both* preferences: the user's own (``own``) and the other user's (``other``); ``fidelity`` is the
fraction of well-formed on-topic answers. At the end the last adapters and the base model are evaluated
again on twice as many openings against both preferences.

Acceptance (``two_users_report.acceptance``), per user, on the version kept: the user's best evaluated version (highest
own score, then highest fidelity, then the earliest), since this toy model's fidelity can collapse after
10-25 updates (rolling back to that version is what a user would do: the final evaluation republishes it
to the user's adapter). The version kept must have an own score >= ``OWN_MIN`` (0.9) and, on the other
user's preference, a score within ``LEAK_TOL`` (0.15) of the base model's on the same openings (``|other -
base| <= LEAK_TOL``: no leak of the other's preference, and no large side effect either). The same verdict
is also given for the last versions.

Output: ``<out>/two_users.json`` (every curve, the final evaluations, update order, wall time, verdicts) and
``<out>/two_users.md`` (``two_users_smoke.*`` with ``--smoke``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evaluation import LEARNING_TOPICS, evaluate_many
from lockstep import LockstepUser, budgeted_store, probe_callback
from run import RESULTS, ROOT, BenchSettings, RunResult, bo4
from two_users_report import LEAK_TOL, OWN_MIN, acceptance, earlier_runs, markdown

RECIPE = ROOT / "recipes" / "toy_two_users.yaml"
UPDATES = 48
"""Updates per user: the learning benchmark's Best-of-4 rows make 32, after which one of two users measured
here still stood at 0.86 (seed 0); with 48 both passed (``benchmarks/results/two_users.md``)."""
log = logging.getLogger("learning-bench")


@dataclass
class UserCurve:
    """One user's evaluations, one entry per point (index 0 = before the first update): ``run`` holds the
    own-preference curves as ``run.py`` records them (``rates``, ``fidelity``, ...; conversations and turns
    used), ``other_rates`` the same answers scored against the other user's preference, ``versions`` the
    adapter version each point evaluated, ``seconds`` when (since the start of the run)."""

    run: RunResult
    other: str
    other_rates: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    kept_index: int = 0
    kept_adapter: dict | None = None  # the version kept's PEFT state dict (not saved to the JSON)


def user_preference(config) -> str:
    """The hidden preference of the simulated user a recipe's user has (``simulated_user``, e.g.
    ``openclaw_trl.toy.people:bullets``)."""
    module, _, name = config.simulated_user.partition(":")
    return getattr(importlib.import_module(module), name)().preferred


def recipe_argv(settings: BenchSettings, seed: int, out_dir: Path, model: str | None) -> list[str]:
    """The recipe and the overrides that make it the benchmark's ``combine+bo4+memory`` row."""
    fields = {
        "output_dir": out_dir,
        "lora_r": settings.lora_r,
        "lora_alpha": settings.lora_alpha,
        "batch_size": settings.batch_size,
        "per_device_train_batch_size": settings.batch_size,
        "learning_rate": settings.learning_rate,
        "max_grad_norm": settings.max_grad_norm,
        "optim": settings.optim,
        "advantage_baseline": settings.advantage_baseline,
        "loss_type": settings.loss_type,
        "max_completion_length": settings.max_tokens,
        "max_steps": settings.updates,
        "teacher": settings.teacher,
        "engine_max_batch_size": 64,
        "session_idle_timeout": 3600,
        "save_strategy": "no",
        "adapter_history": 0,
        "disable_tqdm": "true",
        "seed": seed,
        **dict(bo4("memory")),
    }
    if model:
        fields["model_name_or_path"] = model
    argv = ["--config", str(RECIPE)]
    for key, value in fields.items():
        argv += [f"--{key}", str(value)]
    return argv


def load_config(settings: BenchSettings, seed: int, out_dir: Path, model: str | None):
    """``(config, model_args, recipe, keys)`` of one run; ``keys``: each user's bearer key by name, the
    environment's (``api_key_env``) or a fresh random one set there when it has none."""
    from openclaw_trl.recipe import load_recipe

    config, model_args, recipe = load_recipe(recipe_argv(settings, seed, out_dir, model))
    if len(config.user_specs) != 2:
        raise ValueError(f"{RECIPE.name} must list two users, not {len(config.user_specs)}")
    keys = {}
    for spec in config.user_specs:
        if not os.environ.get(spec.api_key_env, "").strip():
            os.environ[spec.api_key_env] = secrets.token_hex(16)
        keys[spec.name] = os.environ[spec.api_key_env].strip()
    return config, model_args, recipe, keys


def kept_index(curve: UserCurve) -> int:
    """The point kept: highest own score, then highest fidelity, then the earliest."""
    run = curve.run
    return max(range(len(run.rates)), key=lambda i: (run.rates[i], run.fidelity[i], -i))


def make_measure(user, curve: UserCurve, settings: BenchSettings, started: float):
    """The evaluation at one point of ``user``'s training (appends to ``curve``), in their trainer's thread."""
    from peft import get_peft_model_state_dict

    run = curve.run

    def measure() -> None:
        points = evaluate_many(user.engine, settings, (run.preference, curve.other))
        own = points[run.preference]
        run.rates.append(own.rate)
        run.rates_unseen.append(own.rate_unseen)
        run.fidelity.append(own.fidelity)
        run.fidelity_unseen.append(own.fidelity_unseen)
        run.distinct.append(own.distinct)
        run.served_rates.append(own.rate)
        curve.other_rates.append(points[curve.other].rate)
        curve.versions.append(user.engine.policy_version)
        curve.seconds.append(round(time.perf_counter() - started, 1))
        best = kept_index(curve)
        if best == len(run.rates) - 1 or curve.kept_adapter is None:
            trainer = user.trainer
            state = get_peft_model_state_dict(trainer.accelerator.unwrap_model(trainer.model))
            curve.kept_index, curve.kept_adapter = best, {k: v.detach().clone() for k, v in state.items()}

    return measure


def run_two_users(settings: BenchSettings, seed: int, out_dir: Path, model: str | None) -> dict:
    """One run of the two users (module docstring); returns its record."""
    from transformers import set_seed
    from transformers.trainer_callback import PrinterCallback

    from openclaw_trl.engines.views import AdapterView
    from openclaw_trl.run_training import stop_users, train_users
    from openclaw_trl.runtime import build_runtime, start_server

    started = time.perf_counter()
    set_seed(seed)
    config, model_args, recipe, keys = load_config(settings, seed, out_dir, model)
    runtime = build_runtime(config, model_args, recipe)
    prefs = {u.name: user_preference(u.config) for u in runtime.users}
    names = list(prefs)
    curves, talkers = {}, {}
    try:
        for i, user in enumerate(runtime.users):
            other = prefs[names[1 - i]]
            run = RunResult(
                row=user.name,
                method=config.method,
                backend=config.judge_backend,
                seed=seed,
                label=f"{user.name} ({prefs[user.name]})",
                preference=prefs[user.name],
            )
            curves[user.name] = UserCurve(run, other)
        for user in runtime.users:
            user.scorer.start()
        server = start_server(runtime, port=0, ui=False)
        for i, user in enumerate(runtime.users):
            mine = dataclasses.replace(settings, preferred=prefs[user.name])
            talker = LockstepUser(
                user,
                server.url,
                mine,
                seed * 10 + i,
                False,
                LEARNING_TOPICS,
                api_key=keys[user.name],
                schedule="live",  # two users share the engine and the turns of the device: timing decides
            )
            talkers[user.name] = talker.start()
            trainer = user.trainer
            trainer.remove_callback(PrinterCallback)
            trainer.sample_timeout = settings.sample_timeout_s
            trainer.store = budgeted_store(user.store, talker)
            measure = make_measure(user, curves[user.name], mine, started)
            trainer.add_callback(probe_callback(talker, curves[user.name].run, measure))
        # the training of ``run`` without its source (which would also start the recipe's free-running
        # simulated users: here each user talks in lock-step with their trainer instead)
        train_users(runtime)
        train_seconds = time.perf_counter() - started
        for talker in talkers.values():
            talker.close()
        for name, talker in talkers.items():
            if talker.error is not None:
                raise RuntimeError(f"the simulated user {name} failed: {talker.error!r}") from talker.error
        final = final_evaluation(runtime, settings, prefs, curves, AdapterView)
    finally:
        for talker in talkers.values():
            talker.close()
        stop_users(runtime)
        runtime.close()
    order = list(runtime.users[0].trainer.update_turns.order)
    for user in runtime.users:
        run = curves[user.name].run
        run.policy_version = user.trainer.state.global_step
        run.samples_used = user.trainer.samples_used
        run.first_ok = list(talkers[user.name].first_ok)
        run.stopped_early = talkers[user.name].exhausted.is_set()
        run.seconds = round(train_seconds, 1)
    return record(seed, prefs, curves, final, order, train_seconds, time.perf_counter() - started)


def final_evaluation(runtime, settings, prefs: dict, curves: dict, view_of) -> dict:
    """The base model and each user's last adapter, then the version kept (republished to their adapter),
    on both preferences, on twice the per-update points' openings per topic (a finer verdict)."""
    wide = dataclasses.replace(settings, eval_per_topic=2 * settings.eval_per_topic)
    both = tuple(prefs.values())
    out = {"base": _rates(evaluate_many(runtime.engine, wide, both, weights="base"))}
    views = {name: view_of(runtime.engine, name) for name in prefs}
    out["last"] = {name: _rates(evaluate_many(views[name], wide, both)) for name in prefs}
    out["kept"] = {}
    for name, view in views.items():
        curve = curves[name]
        version = curve.versions[curve.kept_index]
        view.publish_adapter(curve.kept_adapter, version=view.policy_version + 1)
        out["kept"][name] = _rates(evaluate_many(view, wide, both)) | {"version": version}
    return out


def _rates(points: dict) -> dict:
    fidelity = next(iter(points.values())).fidelity  # the same answers: one fidelity
    return {pref: round(p.rate, 4) for pref, p in points.items()} | {"fidelity": round(fidelity, 4)}


def record(seed, prefs, curves, final, order, train_seconds, seconds) -> dict:
    users = {}
    for name, curve in curves.items():
        run = asdict(curve.run)
        run.pop("served_rates")  # equal to rates here (the plain evaluation)
        users[name] = {
            "preference": prefs[name],
            "other_preference": curve.other,
            "own_rates": run.pop("rates"),
            "other_rates": curve.other_rates,
            "versions": curve.versions,
            "seconds_at": curve.seconds,
            "kept_version": curve.versions[curve.kept_index],
        } | run
    return {
        "seed": seed,
        "users": users,
        "update_order": order,
        "final": final,
        "acceptance_kept": acceptance(final["kept"], final["base"], prefs),
        "acceptance_last": acceptance(final["last"], final["base"], prefs),
        "train_seconds": round(train_seconds, 1),
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--updates", type=int, default=None, help=f"per user (default: {UPDATES})")
    parser.add_argument("--smoke", action="store_true", help="the tiny toy model, 1 update of 2 samples each")
    parser.add_argument("--out", default=str(RESULTS), help="where two_users.json / .md go")
    parser.add_argument("--work-dir", default=None, help="the runs' folders (default: a temporary folder)")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the runs of the report already in --out (same settings and model) and add these seeds",
    )
    args = parser.parse_args(argv)
    if args.updates is not None and args.updates < 1:
        parser.error("--updates must be at least 1")
    import tempfile

    import torch

    from openclaw_trl.toy import pretrain

    torch.set_num_threads(1)  # a shared 2-core machine: one thread is several times faster than two
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "openclaw_trl", "transformers", "trl", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    settings = BenchSettings(updates=UPDATES)
    model = None  # the recipe's: the toy model shipped with the package
    if args.smoke:
        settings.updates, settings.batch_size, settings.eval_per_topic, settings.max_tokens = 1, 2, 1, 12
        settings.sample_timeout_s = 120.0
        model = str(pretrain.toy_model(pretrain.TINY, log=log.info))
    settings.updates = args.updates or settings.updates
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="two-users-"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "two_users_smoke" if args.smoke else "two_users"
    report = {
        "commands": [" ".join(["python benchmarks/learning/two_users.py", *(argv or sys.argv[1:])])],
        "model": model or "openclaw-trl/toy",
        "smoke": args.smoke,
        "settings": asdict(settings) | {"final_eval_per_topic": 2 * settings.eval_per_topic},
        "rule": {"own_min": OWN_MIN, "leak_tolerance": LEAK_TOL},
        "runs": [],
    }
    if args.append:
        report["runs"], commands = earlier_runs(out / f"{stem}.json", report, args.seeds)
        report["commands"] = commands + report["commands"]
    for seed in args.seeds:
        log.info("seed %d: two users, %d updates each", seed, settings.updates)
        report["runs"].append(run_two_users(settings, seed, work / f"seed{seed}", model))
        log.info("seed %d done in %.0f s", seed, report["runs"][-1]["seconds"])
        report["pass"] = all(r["acceptance_kept"]["pass"] for r in report["runs"])
        (out / f"{stem}.json").write_text(json.dumps(report, indent=1))  # after every seed
        summary = markdown(report)
        (out / f"{stem}.md").write_text(summary)
    print(summary)
    print(f"wrote {out}/{stem}.json and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
