"""What the version guard costs per update: ``OpenClawTrainer`` with ``guard: true`` vs ``guard: false``.

    .venv/bin/python benchmarks/guard_bench.py --quick     # the toy model + a short 0.6B-shaped run (~3 min)
    .venv/bin/python benchmarks/guard_bench.py             # more steps and rounds
    .venv/bin/python benchmarks/guard_bench.py --smoke     # the tiny model, a few steps: that it runs
    python benchmarks/guard_bench.py --gpu                 # the 0.6B-shaped model, larger batch, on the GPU

The two trainers get the same model directory, LoRA config, batch geometry, optimizer and the very same
samples (``trainer_bench.make_samples``), and each store also holds served turns whose prompts and replies
have the batch's lengths, so the guard compares on the person's recent turns (``guard_recent_prompts``) and on
its neutral prompts as it does in a run. The guard's bounds are set out of reach here (random samples move a
random model anywhere), so it never holds a version back and both trainers train the same. They live in one
process, each in a thread, and take one optimizer step in turn (``trainer_bench.Baton``): the figure is the
median over steps of the paired ratio guard on / off of the process CPU time (wall time on a GPU), minus 1:
the guard's share of an update (target <= 0.10). The first step of each run is dropped (it also samples the
neutral prompts' base replies, once per run, and computes the base's side of every row). The served turns are
all stored before training, so the rows stay the same from one update to the next and the figure is the
candidate's side of the check; in a run a turn that arrives between two updates adds one base forward over its
row to the next check.

Results go to ``benchmarks/results/guard_bench_<time>.json`` (git-ignored) unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_results  # noqa: E402
from _smoke import parse_args  # noqa: E402
from _trainer_setup import (  # noqa: E402
    GEOMETRY,
    Memory,
    build_openclaw,
    make_samples,
    median_after_warmup,
    median_pair_ratio,
    model_dir,
    run_trainers,
)

PLANS = {
    "quick": [("toy", "tiny", 6, 2), ("qwen3-0.6b-shaped", "qwen3-0.6b-shaped", 4, 1)],
    "default": [("toy", "tiny", 10, 3), ("qwen3-0.6b-shaped", "qwen3-0.6b-shaped", 6, 1)],
    "gpu": [("qwen3-0.6b-shaped", "qwen3-0.6b-shaped-gpu", 8, 2)],
    "smoke": [("tiny", "tiny-smoke", 3, 1)],
}
"""What each mode runs: (model, geometry, steps per run, rounds)."""


def model_path(label: str) -> Path:
    """The toy model shipped with the package (the demo's), or a random one of ``trainer_bench``."""
    if label == "toy":
        from openclaw_trl.toy.pretrain import PACKAGED_DIR

        return Path(PACKAGED_DIR)
    return model_dir(label)


def add_turns(store, samples: list) -> None:
    """One served turn per sample (its prompt and completion), in one session: the person's recent turns."""
    from openclaw_trl.records import ServedTurn

    session = store.conversations.open_session("bench")
    for s in samples:
        store.conversations.add_turn(
            ServedTurn(
                session_id=session,
                turn_type="main",
                prompt_messages=[{"role": "user", "content": f"turn {s.turn_id}"}],
                tools=None,
                prompt_ids=s.prompt_ids,
                completion_ids=s.completion_ids,
                sampling_logprobs=s.sampling_logprobs,
                completion_text="",
                temperature=s.temperature,
                policy_version=s.policy_version,
                finish_reason="stop",
                trainable=True,
            )
        )


def build(path: Path, guard: bool, samples, geometry, steps, tmp, kd_topk, timer):
    """``trainer_bench.build_openclaw`` with the guard on or off; its store also holds the served turns."""
    extra = {
        "guard": guard,
        "guard_max_kl": 1e9,
        "guard_max_implausible": 1e9,
        "guard_max_entropy_drop": 1e9,
        "guard_max_entropy_rise": 1e9,
    }
    trainer = build_openclaw(path, samples, geometry, steps, tmp, kd_topk, timer, extra_args=extra)
    add_turns(trainer.store, samples[: steps * geometry["batch"]])
    return trainer


def bench(label: str, geometry: dict, steps: int, rounds: int) -> dict:
    from transformers import AutoTokenizer

    path = model_path(label)
    vocab = min(len(AutoTokenizer.from_pretrained(path)), 2000)
    samples = make_samples(steps * geometry["batch"], geometry, vocab)
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    for rnd in range(rounds):
        print(f"[{label}] round {rnd + 1}/{rounds}: guard on / off, paired steps", flush=True)
        jobs = {
            name: (functools.partial(build, path, name == "on"), samples, geometry, steps, 0)
            for name in ("on", "off")
        }
        for name, res in run_trainers(jobs, paired=True).items():
            runs[name].append(res)
    key = "step_s" if Memory().cuda else "cpu_s"
    return {
        "model": label,
        "geometry": {k: geometry[k] for k in ("batch", "micro", "prompt_len", "completion_len")},
        "steps_per_run": steps,
        "rounds": rounds,
        "guard_on_step_s": median_after_warmup(runs["on"]),
        "guard_off_step_s": median_after_warmup(runs["off"]),
        "basis": "wall time" if key == "step_s" else "process CPU time",
        "guard_share": median_pair_ratio(runs["on"], runs["off"], key) - 1.0,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the toy model + a short 0.6B-shaped run")
    ap.add_argument("--gpu", action="store_true", help="the 0.6B-shaped model, larger batch, on the GPU")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps per run (first = warm-up)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = parse_args(ap, argv, {"quick": False})
    mode = "smoke" if args.smoke else "gpu" if args.gpu else "quick" if args.quick else "default"
    report: dict = {"mode": mode, "models": []}
    for label, geometry_name, steps, rounds in PLANS[mode]:
        result = bench(label, dict(GEOMETRY[geometry_name]), args.steps or steps, args.rounds or rounds)
        report["models"].append(result)
        print(
            f"[{label}] update {result['guard_off_step_s']:.3f} s without the guard, "
            f"{result['guard_on_step_s']:.3f} s with it: the guard costs {result['guard_share']:.1%} of an "
            f"update ({result['basis']}; target <= 10%)",
            flush=True,
        )
    write_results(report, "guard_bench", args.out)
    return report


if __name__ == "__main__":
    main()
