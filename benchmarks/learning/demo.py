"""The offline demo's recipe with a simulated person: does ``recipes/toy_offline.yaml`` learn a style from clicks
quickly and stay whole?

    python benchmarks/learning/demo.py                     # 5 seeds, 30 updates each (~10 min on 2 cores)
    python benchmarks/learning/demo.py --seeds 0 --updates 8
    python benchmarks/learning/demo.py --smoke             # 2 updates, seed 0: that it runs

The recipe is loaded as ``app.py`` loads it (``runtime.load_recipe``), with only what a benchmark must change:
no checkpoints, ``max_steps`` = the updates, the seed, and any ``--set field=value`` given. The person is the
toy world's ``FeedbackUser`` who wants bulleted answers: each reply gets 👍, or 👎 with the correction the demo
asks for ("Please answer as a bulleted list.", the requests of what the reply missed), through
``POST /v1/feedback`` as the UI sends it; the ``feedback`` judge turns the rating into the reward and the
correction into the hint. The schedule is the learning benchmark's lockstep one (``lockstep.py``): seeded
requests, turns judged in step, each batch taken once the person paused, so a run is a function of its seed.

After every update (and before the first) the served policy answers the demo's walk-through prompt, "Tell me
about apples.", ``--answers`` times (fixed seeds, the serving temperature: what the learning panel's *What
changed* samples), and "Tell me about <topic>." as often for every topic of the toy world: ``apples`` is how many
of the walk-through answers are in the taught style, ``styled`` the share over every topic, ``fidelity`` the
share of well-formed answers about the asked topic. The demo's promise, checked per seed: every walk-through
answer styled by update 8 (``--by``), and from then on through the last update at least 90% of them styled
with fidelity >= 0.9 at every version. Results: ``benchmarks/results/demo_person.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evaluation import evaluate
from lockstep import BudgetExhausted, LockstepUser, budgeted_store, probe_callback

from openclaw_trl.toy import world as toy_world

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "toy_offline.yaml"
log = logging.getLogger("learning-bench")


@dataclass
class DemoSettings:
    """What the lockstep person and the evaluation read (the recipe's own fields come from the recipe)."""

    batch_size: int
    temperature: float
    max_tokens: int = 48
    eval_per_topic: int = 10
    eval_seed: int = 777
    eval_topics: tuple[str, ...] = toy_world.TOPICS
    preferred: str = "bullets"
    max_conversations: int = 400


@dataclass
class Curve:
    """One run's points, index = update (0: before any update)."""

    row: str
    seed: int
    noise: float = 0.0
    rates: list[float] = None
    apples: list[int] = None
    fidelity: list[float] = None
    conversations: list[int] = None
    turns: list[int] = None
    online_first_ok: list = None

    def __post_init__(self):
        for name in ("rates", "apples", "fidelity", "conversations", "turns", "online_first_ok"):
            setattr(self, name, [])


def walkthrough_styled(engine, settings: DemoSettings) -> int:
    """How many of ``eval_per_topic`` answers to "Tell me about apples." are in the taught style."""
    from evaluation import sample

    one = dataclasses.replace(settings, eval_topics=("apples",))
    _, texts = sample(engine, one, 0)
    wants = toy_world.preference(settings.preferred)
    return sum(wants.matches(t) for t in texts)


def run_seed(seed: int, updates: int, answers: int, overrides: list[str], work: Path) -> dict:
    from transformers import set_seed

    from openclaw_trl.runtime import build_runtime, load_recipe, start_server

    set_seed(seed)
    argv = ["--config", str(RECIPE), "--output_dir", str(work / f"seed{seed}"), "--save_strategy", "no"]
    argv += [
        "--adapter_history",
        "0",
        "--max_steps",
        str(updates),
        "--seed",
        str(seed),
        "--report_to",
        "none",
    ]
    argv += overrides
    config, model_args, recipe = load_recipe(argv)
    runtime = build_runtime(config, model_args, recipe)
    settings = DemoSettings(
        batch_size=config.batch_size, temperature=config.temperature, eval_per_topic=answers
    )
    curve = Curve("demo", seed)

    def measure() -> None:
        point = evaluate(runtime.engine, settings, settings.preferred)
        curve.rates.append(point.rate)
        curve.fidelity.append(point.fidelity)
        curve.apples.append(walkthrough_styled(runtime.engine, settings))

    started, user = time.perf_counter(), None
    try:
        server = start_server(runtime, port=0, ui=False)
        user = LockstepUser(
            runtime.user, server.url, settings, seed, True, toy_world.TOPICS, schedule="lockstep"
        )
        runtime.user.trainer.store = budgeted_store(runtime.user.store, user.start())
        runtime.user.trainer.add_callback(probe_callback(user, curve, measure))
        try:
            runtime.user.trainer.train()
        except BudgetExhausted:
            log.info("seed %d: the conversation budget ran out after %d updates", seed, len(curve.rates) - 1)
    finally:
        if user is not None:
            user.close()
        runtime.stop_event.set()
        runtime.close()
    updates = [e for e in runtime.user.trainer.state.log_history if "reward" in e]
    held = [e.get("guard/held", 0.0) for e in updates]
    return {
        "guard": [{k: e[k] for k in e if k.startswith("guard/") or k == "time/update_s"} for e in updates],
        "seed": seed,
        "apples": curve.apples,
        "styled": curve.rates,
        "fidelity": curve.fidelity,
        "conversations": curve.conversations,
        "held_back": int(sum(held)),
        "seconds": round(time.perf_counter() - started, 1),
    }


def verdict(run: dict, by: int, answers: int) -> dict:
    """The demo's promise for one run: every walk-through answer styled by update ``by``; from then on at least
    90% of them styled and fidelity >= 0.9 through the last update."""
    apples, fidelity = run["apples"], run["fidelity"]
    first_all = next((i for i, n in enumerate(apples) if n == answers), None)
    later = list(zip(apples[by:], fidelity[by:], strict=True))
    return {
        "all_styled_at_update": first_all,
        "all_styled_by": first_all is not None and first_all <= by,
        "stays_whole": bool(later) and all(n >= 0.9 * answers and f >= 0.9 for n, f in later),
        "fewest_styled_after": min((n for n, _ in later), default=None),
        "lowest_fidelity_overall": min(fidelity) if fidelity else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--by", type=int, default=8, help="the update by which every answer must be styled")
    ap.add_argument("--answers", type=int, default=10, help="answers per topic at each evaluation")
    ap.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="a recipe override (a list: a,b)"
    )
    ap.add_argument("--smoke", action="store_true", help="2 updates, 1 answer per topic, seed 0")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "demo_person.json"))
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.updates, args.answers, args.by = [0], 2, 1, 2
    overrides = []
    for item in args.set:
        field, _, value = item.partition("=")
        overrides += [f"--{field}", *value.split(",")]  # a list field: comma-separated values

    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "openclaw_trl", "transformers", "trl", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    runs = []
    with tempfile.TemporaryDirectory(prefix="demo-bench-") as work:
        for seed in args.seeds:
            run = run_seed(seed, args.updates, args.answers, overrides, Path(work))
            run["verdict"] = verdict(run, args.by, args.answers)
            runs.append(run)
            log.info("seed %d: walk-through answers styled %s; %s", seed, run["apples"], run["verdict"])
    report = {
        "recipe": str(RECIPE.relative_to(ROOT)),
        "overrides": args.set,
        "updates": args.updates,
        "by": args.by,
        "answers_per_topic": args.answers,
        "runs": runs,
        "passed": sum(r["verdict"]["all_styled_by"] and r["verdict"]["stays_whole"] for r in runs),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"demo promise kept in {report['passed']}/{len(runs)} seeds; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
