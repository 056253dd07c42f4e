"""The openclaw-trl chat app: engine + store + judges + trainer + the Gradio UI / OpenAI API, in one process.

    python app.py                                   # the default recipe (recipes/combine_qwen3_0.6b_lora.yaml)
    python app.py --config recipes/toy_offline.yaml
    accelerate launch app.py --config recipes/combine_qwen3_4b_lora.yaml
    accelerate launch --cpu --num_processes 1 app.py --config recipes/tiny_simulated.yaml --max_steps 3

Every field of the recipe can be overridden on the command line (``--learning_rate 1e-5``); the UI and
the API listen on the recipe's ``host:port`` (127.0.0.1:7860 by default) when ``source`` is ``live``;
``--share`` adds a public Gradio link (only with ``api_key_env`` set: the API trains the model).

Without ``--config``, when the default recipe's model can be neither found in the Hugging Face cache nor
fetched from the Hub (offline, or ``HF_HUB_OFFLINE=1``), one line says so and the offline toy demo
(``recipes/toy_offline.yaml``) starts instead. A recipe chosen with ``--config`` whose model cannot be
fetched ends with a one-line error.
"""

from __future__ import annotations

import sys
from pathlib import Path

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

    from openclaw_trl.runtime import TINY_MODEL_ID, TOY_MODEL_ID

    if not name or name in (TINY_MODEL_ID, TOY_MODEL_ID) or Path(name).is_dir():
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
    a one-line message (``SystemExit``) instead.
    """
    chosen = "--config" in argv or "--model_name_or_path" in argv
    full = argv if "--config" in argv else ["--config", DEFAULT_RECIPE, *argv]
    name = recipe_model(full)
    problem = model_problem(name)
    if problem is None:
        return full
    if chosen:
        raise SystemExit(
            f"error: {problem}. Point model_name_or_path at a local copy, or try {OFFLINE_RECIPE}"
        )
    print(
        f"{name} cannot be fetched (offline?): starting the offline toy demo instead ({OFFLINE_RECIPE})",
        file=sys.stderr,
        flush=True,
    )
    return ["--config", OFFLINE_RECIPE, *argv]


def main(argv: list[str]) -> int:
    from openclaw_trl.cli import quiet_openmp

    quiet_openmp()
    from openclaw_trl.commands.train import run_argv

    return run_argv(choose_recipe(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
