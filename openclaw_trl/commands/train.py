"""``openclaw-trl train --config recipes/<recipe>.yaml [--field value ...]``: learn without the UI.

The recipe's ``source`` says where turns come from (``replay``, ``simulated``, or ``live``: the UI and
the API). TrlParser semantics: the YAML sets the defaults, command-line flags override; ``--share`` asks
Gradio for a public link (live source, with ``api_key_env`` set). ``python app.py`` runs this too.
"""

from __future__ import annotations

import json
import logging
import sys

from openclaw_trl.store import SampleSourceError


def run_argv(argv: list[str]) -> int:
    from openclaw_trl.runtime import build_runtime, load_recipe, run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    share = "--share" in argv  # a public Gradio link (live source; needs api_key_env)
    config, model_args, recipe_yaml = load_recipe([a for a in argv if a != "--share"])
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
