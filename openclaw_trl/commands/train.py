"""``openclaw-trl train --config recipes/<recipe>.yaml [--field value ...]``: learn without the UI.

The recipe's ``source`` says where turns come from (``replay``, ``simulated``, or ``live``: the UI and
the API). TrlParser semantics: the YAML sets the defaults, command-line flags override; ``--share`` asks
Gradio for a public link (live source, with ``api_key_env`` set). ``python app.py`` runs this too.

Without ``--config``, when the default recipe's model can be neither found in the Hugging Face cache nor
fetched from the Hub (offline, or ``HF_HUB_OFFLINE=1``), one line says so and the offline toy demo
(``recipes/toy_offline.yaml``) starts instead. A recipe chosen with ``--config`` whose model cannot be
fetched ends with a one-line error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from openclaw_trl.errors import UserError
from openclaw_trl.store import SampleSourceError

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

    from openclaw_trl.runtime import TINY_AGENT_MODEL_ID, TINY_MODEL_ID, TOY_MODEL_ID

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


def run_argv(argv: list[str]) -> int:
    from openclaw_trl.console import configure_console
    from openclaw_trl.runtime import build_runtime, load_recipe, run

    configure_console()  # until the recipe's log_level is known
    argv = choose_recipe(argv)
    share = "--share" in argv  # a public Gradio link (live source; needs api_key_env)
    config, model_args, recipe_yaml = load_recipe([a for a in argv if a != "--share"])
    configure_console(config.log_level)
    runtime = build_runtime(config, model_args, recipe_yaml)
    try:
        metrics = run(runtime, share=share)
    except SampleSourceError as exc:
        print(f"openclaw-trl: {exc}", file=sys.stderr)
        return 1
    if runtime.trainer.accelerator.is_main_process:
        print(
            json.dumps({"policy_version": runtime.trainer.state.global_step, "metrics": metrics}, default=str)
        )
    return 0
