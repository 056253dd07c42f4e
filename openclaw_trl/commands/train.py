"""``openclaw-trl train --config recipes/<recipe>.yaml [--field value ...]``: learn without the UI.

The recipe's ``source`` says where turns come from (``replay``, ``simulated``; ``live`` serves the API
without the Gradio UI). TrlParser semantics: the YAML sets the defaults, command-line flags override.
"""

from __future__ import annotations

import json
import logging


def run_argv(argv: list[str]) -> int:
    from openclaw_trl.runtime import build_runtime, load_recipe, run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config, model_args, recipe_yaml = load_recipe(argv)
    runtime = build_runtime(config, model_args, recipe_yaml)
    metrics = run(runtime)
    if runtime.trainer.accelerator.is_main_process:
        print(
            json.dumps({"policy_version": runtime.trainer.state.global_step, "metrics": metrics}, default=str)
        )
    return 0
