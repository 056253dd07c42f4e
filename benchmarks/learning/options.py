"""The learning benchmark's command line: its options and the ``BenchSettings`` they make."""

from __future__ import annotations

import argparse

from lockstep import SCHEDULES
from report import RESULTS
from rows import DEFAULT_ROWS, ROWS, BenchSettings


def parse_args(argv: list[str] | None, description: str) -> argparse.Namespace:
    """The options of ``run.py`` (``--help`` lists them); ``--judge-noise`` values must be probabilities."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="1 seed, 8 updates")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="that it runs, in seconds: 1 seed, 2 updates of 2 samples, a toy model pre-trained for 30 steps "
        "(nothing is learnt); writes learning_smoke.*",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument(
        "--methods",
        nargs="+",
        default=DEFAULT_ROWS,
        choices=list(ROWS),
        help="rows to run (default: %(default)s)",
    )
    parser.add_argument(
        "--judge-noise", type=float, nargs="+", default=[0.0, 0.2], help="levels p to run at (default: 0 0.2)"
    )
    parser.add_argument("--updates", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--optim", default=None, help="TrainingArguments' optim (adamw_torch, sgd, ...)")
    parser.add_argument("--adam-epsilon", type=float, default=None)
    parser.add_argument("--warmup-steps", type=int, default=None)
    parser.add_argument("--weight-decay", type=float, default=None)
    parser.add_argument("--max-grad-norm", type=float, default=None)
    parser.add_argument("--lr-scheduler-type", default=None)
    parser.add_argument("--beta", type=float, default=None, help="KL penalty to the base model (TRL's beta)")
    parser.add_argument("--advantage-baseline", default=None, choices=("none", "session_mean", "batch_mean"))
    parser.add_argument(
        "--loss-type",
        default=None,
        choices=("grpo", "bnpo", "dr_grpo", "dapo"),
        help="TRL's loss aggregation",
    )
    parser.add_argument(
        "--guard",
        choices=("on", "off", "observe"),
        default=None,
        help="the version guard (default on); observe: its signals logged, no version held back",
    )
    parser.add_argument(
        "--group-std-floor",
        type=float,
        default=None,
        help="Best-of-N rows: the smallest group std divided by",
    )
    parser.add_argument(
        "--group-entropy-coef",
        type=float,
        default=None,
        help="Best-of-N rows: group reward = score - coef * log pi(candidate)",
    )
    parser.add_argument("--max-conversations", type=int, default=None, help="per run (budget)")
    parser.add_argument("--teacher", choices=("base", "policy"), default=None, help="OPD teacher weights")
    parser.add_argument("--w-rl", type=float, default=None, help="Combine's reward weight (ablations)")
    parser.add_argument("--w-opd", type=float, default=None, help="Combine's OPD weight (ablations)")
    parser.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default="lockstep",
        help="lockstep (default): each run is a function of its seed; live: the user talks while the trainer "
        "trains and batches follow thread timing (cached apart)",
    )
    parser.add_argument("--rerun", action="store_true", help="run again what the cache already has")
    parser.add_argument("--report-only", action="store_true", help="no runs: the report of the cached ones")
    parser.add_argument("--model-dir", default=None, help="default: the toy model in the user cache")
    parser.add_argument("--out", default=str(RESULTS), help="where learning.json / .png / _summary.md go")
    parser.add_argument("--cache-dir", default=None, help="default: <out>/learning_runs[_quick|_smoke]")
    parser.add_argument(
        "--from-json", default=None, help="only redraw the plot and summary of a saved report"
    )
    args = parser.parse_args(argv)
    if any(not 0.0 <= p <= 1.0 for p in args.judge_noise):
        parser.error("--judge-noise values are probabilities in [0, 1]")
    return args


def bench_settings(args: argparse.Namespace) -> BenchSettings:
    """The defaults of ``BenchSettings`` with ``--quick`` / ``--smoke`` and every option given applied."""
    settings = BenchSettings()
    if args.quick:
        settings.updates, settings.eval_per_topic = 8, 4
    if args.smoke:
        settings.updates, settings.batch_size, settings.eval_per_topic, settings.max_tokens = 2, 2, 1, 12
        settings.sample_timeout_s = 120.0
    settings.updates = args.updates or settings.updates
    settings.batch_size = args.batch_size or settings.batch_size
    settings.learning_rate = args.learning_rate or settings.learning_rate
    tunable = (
        "optim",
        "adam_epsilon",
        "warmup_steps",
        "weight_decay",
        "max_grad_norm",
        "lr_scheduler_type",
        "beta",
        "advantage_baseline",
        "loss_type",
        "guard",
        "group_std_floor",
        "group_entropy_coef",
    )
    for name in tunable:
        if getattr(args, name) is not None:
            setattr(settings, name, getattr(args, name))
    settings.max_conversations = args.max_conversations or settings.max_conversations
    settings.teacher = args.teacher or settings.teacher
    settings.schedule = args.schedule
    settings.w_rl = settings.w_rl if args.w_rl is None else args.w_rl
    settings.w_opd = settings.w_opd if args.w_opd is None else args.w_opd

    return settings
