"""``openclaw-trl compare``: did it learn for me? Your recent prompts answered by two adapter versions.

Loads the base model once (HF engine), takes the most recent prompts of the store's conversations not marked
private, and answers each with both versions (0 = the base model, any other ``v`` = the adapter of the run's
``checkpoint-<v>``, ``latest`` = the newest one kept) with the same seed; prints them side by side. Works
offline: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from openclaw_trl.commands.user_folder import add_user_argument, user_folder, user_store
from openclaw_trl.errors import UserError

LATEST = "latest"
MAX_PROMPTS = 50
MAX_NEW_TOKENS = 2048


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        required=True,
        help="the run's SQLite store (e.g. runs/x/openclaw.sqlite) or its output_dir",
    )
    add_user_argument(parser, "prompts and adapter versions")
    parser.add_argument(
        "--versions",
        required=True,
        nargs=2,
        type=_version,
        metavar=("A", "B"),
        help="two adapter versions (GET /v1/adapters lists them); 0 = the base model, latest = the newest kept "
        "(e.g. --versions 0 latest)",
    )
    parser.add_argument(
        "--run-dir",
        default=None,
        help="the run's output_dir with checkpoint-<v>/ (default: the store's folder)",
    )
    parser.add_argument(
        "--base", default=None, help="base model id or path (default: the one the checkpoints' adapter names)"
    )
    parser.add_argument("--prompts", type=int, default=5, help=f"recent prompts to replay (1-{MAX_PROMPTS})")
    parser.add_argument(
        "--max-new-tokens", type=int, default=128, help=f"tokens per reply (1-{MAX_NEW_TOKENS})"
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0 = greedy)")
    parser.add_argument(
        "--seed", type=int, default=0, help="the i-th prompt is sampled with seed + i on both sides"
    )
    parser.add_argument("--width", type=int, default=100, help="terminal width of the table")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")


def run(args: argparse.Namespace) -> int:
    from openclaw_trl.compare import compare_versions, text_table
    from openclaw_trl.console import configure_console
    from openclaw_trl.engines.base import SamplingParams
    from openclaw_trl.store import Store

    configure_console()  # readable lines, each warning once, no loading bars
    _check_bounds(args)
    store_path = user_store(args.store, args.user)
    if not store_path.is_file():
        raise UserError(f"no store at {store_path}: pass the openclaw.sqlite of a run (--store)")
    run_dir = user_folder(args.run_dir, args.user, "checkpoints") if args.run_dir else store_path.parent
    args.versions = [_latest(run_dir) if v == LATEST else v for v in args.versions]
    checkpoint = {v: _checkpoint(run_dir, v) for v in args.versions if v != 0}
    base = args.base or _base_model(checkpoint, run_dir)
    with Store(store_path) as store:
        turns = store.queries.recent_prompt_turns(args.prompts)
    if not turns:
        raise UserError(f"{store_path} holds no prompts of conversations that are not private: chat first")
    engine = _engine(base, checkpoint)
    try:
        sampling = SamplingParams(
            temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed
        )
        pairs = compare_versions(engine, turns, tuple(args.versions), checkpoint.__getitem__, sampling)
    finally:
        engine.close()
    left, right = (_label(v) for v in args.versions)
    if args.json:
        print(
            json.dumps(
                [{"turn_id": p.turn_id, "prompt": p.prompt, left: p.left, right: p.right} for p in pairs]
            )
        )
    else:
        print(text_table(pairs, left, right, width=args.width))
    return 0


def _check_bounds(args) -> None:
    if not 1 <= args.prompts <= MAX_PROMPTS:
        raise UserError(f"--prompts must be between 1 and {MAX_PROMPTS}, got {args.prompts}")
    if not 1 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        raise UserError(f"--max-new-tokens must be between 1 and {MAX_NEW_TOKENS}, got {args.max_new_tokens}")
    if args.temperature < 0:
        raise UserError(f"--temperature must be >= 0, got {args.temperature}")
    if any(v != LATEST and v < 0 for v in args.versions):
        raise UserError(f"--versions must be >= 0 (0 = the base model) or latest, got {args.versions}")


def _label(version: int) -> str:
    return "v0 (base model)" if version == 0 else f"v{version}"


def _version(text: str) -> int | str:
    if text == LATEST:
        return LATEST
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a version number or {LATEST}, not {text!r}") from None


def _kept(run_dir: Path) -> list[int]:
    """The versions whose adapter the run keeps (the last ``adapter_history`` ones), oldest first."""
    steps = (int(p.name[11:]) for p in run_dir.glob("checkpoint-*") if p.name[11:].isdigit())
    return sorted(v for v in steps if (run_dir / f"checkpoint-{v}" / "adapter_config.json").is_file())


def _latest(run_dir: Path) -> int:
    kept = _kept(run_dir)
    if not kept:
        raise UserError(f"no checkpoint-<v> with an adapter in {run_dir} yet: rate a few answers first")
    return kept[-1]


def _checkpoint(run_dir: Path, version: int) -> Path:
    path = run_dir / f"checkpoint-{version}"
    if not (path / "adapter_config.json").is_file():
        kept = _kept(run_dir)
        raise UserError(
            f"no adapter for version {version} in {run_dir} (no {path.name}/adapter_config.json); the checkpoints "
            f"kept there are versions {kept or 'none'} (the last adapter_history), or pass --run-dir"
        )
    return path


def _base_model(checkpoints: dict[int, Path], run_dir: Path) -> str:
    """The base model the adapters name (checkpoint-0's when only version 0 is compared)."""
    candidates = list(checkpoints.values()) + [run_dir / "checkpoint-0"]
    for path in candidates:
        config = path / "adapter_config.json"
        if config.is_file():
            base = json.loads(config.read_text()).get("base_model_name_or_path")
            if base:
                return base
    raise UserError(f"cannot tell the base model from {run_dir}: pass --base")


def _engine(base: str, checkpoints: dict[int, Path]):
    from peft import LoraConfig

    from openclaw_trl.engines.hf import HFEngine

    lora = LoraConfig.from_pretrained(str(next(iter(checkpoints.values())))) if checkpoints else None
    try:
        return HFEngine(base, lora_config=lora)
    except OSError as err:
        raise UserError(
            f"could not load the base model {base!r} ({str(err).splitlines()[0]}): pass --base"
        ) from err
