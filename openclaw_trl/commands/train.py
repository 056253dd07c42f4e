"""``openclaw-trl train --config recipes/<recipe>.yaml [--field value ...]``: learn without the UI.

The recipe's ``source`` says where turns come from (``replay``, ``simulated``, or ``live``: the UI and
the API). TrlParser semantics: the YAML sets the defaults, command-line flags override; ``--share`` asks
Gradio for a public link (live source, with ``api_key_env`` set). ``python app.py`` runs this too.

Without ``--config``, when the default recipe's model can be neither found in the Hugging Face cache nor
fetched from the Hub (offline, or ``HF_HUB_OFFLINE=1``), one line says so and the offline toy demo
(``recipes/toy_offline.yaml``) starts instead. A recipe chosen with ``--config`` whose model cannot be
fetched ends with a one-line error.

``--help`` answers at once, without reading a recipe or probing a model: ``--config`` first, then the recipe
fields by group (``--help-fields``: every field with its type, default and meaning; ``--help-trl``: TRL's own
argument list, with the dataclass defaults).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from openclaw_trl.commands.fields import fields_text, group_summary, text_width, wrap
from openclaw_trl.errors import UserError

DEFAULT_RECIPE = "recipes/combine_qwen3_0.6b_lora.yaml"
OFFLINE_RECIPE = "recipes/toy_offline.yaml"
PROBE_TIMEOUT_S = 5.0


def recipe_model(argv: list[str]) -> str | None:
    """``model_name_or_path`` as the run will see it: the command-line override, else the recipe's."""
    if "--model_name_or_path" in argv[:-1]:
        return argv[argv.index("--model_name_or_path") + 1]
    import yaml

    recipe = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text()) or {}
    return recipe.get("model_name_or_path")


def model_problem(name: str | None) -> str | None:
    """Why the model ``name`` cannot be loaded (None when it can: a local directory, an id the runtime builds
    locally, a Hub repository in the local cache or reachable within ``PROBE_TIMEOUT_S``)."""
    from huggingface_hub import HfApi, constants, try_to_load_from_cache

    from openclaw_trl.recipe import TINY_AGENT_MODEL_ID, TINY_MODEL_ID, TOY_MODEL_ID

    if not name or name in (TINY_MODEL_ID, TINY_AGENT_MODEL_ID, TOY_MODEL_ID) or Path(name).is_dir():
        return None

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return None
    if constants.HF_HUB_OFFLINE:
        return f"{name} cannot be fetched (HF_HUB_OFFLINE is set and it is not in the Hugging Face cache)"
    try:
        HfApi().model_info(name, timeout=PROBE_TIMEOUT_S)  # one request, no retries
    except Exception as err:  # noqa: BLE001 - any failure means the run could not load it either
        reason = (str(err).splitlines() or [""])[0]
        return f"{name} cannot be fetched ({type(err).__name__}: {reason})"
    return None


def choose_recipe(argv: list[str]) -> list[str]:
    """``argv`` with a ``--config``: the default recipe, or the offline toy demo when its model is out of reach.

    A model the user chose (``--config`` or ``--model_name_or_path``) that cannot be loaded ends the run with
    a one-line message (a ``UserError``) instead.
    """
    chosen = "--config" in argv or "--model_name_or_path" in argv
    full = argv if "--config" in argv else ["--config", DEFAULT_RECIPE, *argv]
    name = recipe_model(full)
    problem = model_problem(name)
    if problem is None:
        return full
    if chosen:
        raise UserError(f"{problem}. Point model_name_or_path at a local copy, or try {OFFLINE_RECIPE}")
    print(
        f"{name} cannot be fetched (offline?): starting the offline toy demo instead ({OFFLINE_RECIPE})",
        file=sys.stderr,
        flush=True,
    )
    return ["--config", OFFLINE_RECIPE, *argv]


HELP_FLAGS = ("-h", "--help", "--help-fields", "--help-trl")


def help_parser(prog: str) -> argparse.ArgumentParser:
    """The parser ``--help`` prints: ``--config`` first, the recipe fields by group, no recipe's values.

    It only describes: the run itself parses its arguments with TRL's ``TrlParser`` (the recipe sets the
    defaults, ``--FIELD VALUE`` overrides), which needs TRL and a recipe, so ``--help`` does not use it.
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [--config RECIPE] [--FIELD VALUE ...] [--share] [--json-summary] [-h] [--help-fields] "
        "[--help-trl]",
        description=fill(
            "Serve and learn from a recipe. The recipe's source says where turns come from: live (people "
            "through the UI and the OpenAI-compatible API), replay (recorded conversations) or simulated "
            "(a simulated user). The recipe sets the fields; the command line overrides them.",
            text_width(),
        ),
        epilog=fields_summary(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    parser.add_argument(
        "--config",
        metavar="RECIPE",
        help=f"recipe YAML (recipes/*.yaml). Without it: {DEFAULT_RECIPE} (Qwen3-0.6B from the Hugging Face "
        f"Hub), or the offline toy demo {OFFLINE_RECIPE} when that model is neither in the Hugging Face "
        "cache nor reachable",
    )
    parser.add_argument(
        "--FIELD",
        metavar="VALUE",
        help="set a recipe field, e.g. --learning_rate 1e-5 --max_steps 3 (a list: --opd_kd_schedule_steps 0 2)",
    )
    parser.add_argument(
        "--share", action="store_true", help="a public Gradio link to the UI and the API (needs api_key_env)"
    )
    parser.add_argument(
        "--json-summary",
        action="store_true",
        help='after the run, its summary as one JSON line on stdout, for scripts: {"policy_version": N, '
        '"metrics": {...}} (a run with several users: {"users": {name: {...}}})',
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    parser.add_argument(
        "--help-fields",
        action="store_true",
        help="every recipe field with its type, default and meaning, then exit",
    )
    parser.add_argument(
        "--help-trl",
        action="store_true",
        help="TRL's own argument list (GRPOConfig, TrainingArguments, ModelConfig) with TRL's defaults, then "
        "exit (it loads TRL: several seconds)",
    )
    return parser


def fields_summary() -> str:
    """The recipe fields' names by group, under a line saying where their details are."""
    intro = (
        "Recipe fields, by group (set them in the recipe, or here as --FIELD VALUE; their types, defaults "
        "and meaning: --help-fields, openclaw-trl fields WORD, or docs/recipe-fields.md):"
    )
    return fill(intro, text_width()) + "\n" + group_summary()


def fill(text: str, width: int) -> str:
    return "\n".join(wrap(text, width))


def print_help(argv: list[str], prog: str) -> None:
    """Answer ``-h`` / ``--help`` / ``--help-fields`` / ``--help-trl``, without reading a recipe or a model."""
    if "--help-trl" in argv:
        from trl import ModelConfig, TrlParser

        from openclaw_trl.config import OpenClawConfig

        TrlParser((OpenClawConfig, ModelConfig), prog=prog).print_help()
    elif "--help-fields" in argv:
        print(fields_text())
    else:
        help_parser(prog).print_help()


def run_argv(argv: list[str], prog: str = "openclaw-trl train") -> int:
    if any(arg in HELP_FLAGS for arg in argv):
        print_help(argv, prog)
        return 0
    from openclaw_trl.recipe_check import check_run_argv

    # a missing recipe, an unknown field, a value of the wrong type, a taken port: one line, at once
    check_run_argv(argv if "--config" in argv else ["--config", DEFAULT_RECIPE, *argv])
    from openclaw_trl.console import configure_console
    from openclaw_trl.runtime import build_runtime, load_recipe, run
    from openclaw_trl.store import SampleSourceError

    configure_console()  # until the recipe's log_level is known
    argv = choose_recipe(argv)
    share = "--share" in argv  # a public Gradio link (live source; needs api_key_env)
    summary_json = "--json-summary" in argv  # the run's summary as one JSON line on stdout, for scripts
    config, model_args, recipe_yaml = load_recipe([a for a in argv if a not in ("--share", "--json-summary")])
    configure_console(config.log_level)
    runtime = build_runtime(config, model_args, recipe_yaml)
    try:
        metrics = run(runtime, share=share)
    except SampleSourceError as exc:
        print(f"openclaw-trl: {exc}", file=sys.stderr)
        return 1
    if not summary_json:  # the stop line is the run's last word
        return 0
    summary = {
        u.name: {"policy_version": u.trainer.state.global_step, "metrics": metrics.get(u.name, {})}
        for u in runtime.users
    }
    if config.users:  # one entry per user: {"users": {name: {"policy_version", "metrics"}}}
        print(json.dumps({"users": summary}, default=str))
    elif runtime.user.trainer.accelerator.is_main_process:
        print(json.dumps(summary[None], default=str))
    return 0
