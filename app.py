"""The openclaw-trl chat app: engine + store + judges + trainer + the Gradio UI / OpenAI API, in one process.

    python app.py                                   # the default recipe (recipes/combine_qwen3_0.6b_lora.yaml)
    python app.py --config recipes/tiny_offline.yaml
    accelerate launch app.py --config recipes/combine_qwen3_4b_lora.yaml
    accelerate launch --cpu --num_processes 1 app.py --config recipes/tiny_simulated.yaml --max_steps 3

Every field of the recipe can be overridden on the command line (``--learning_rate 1e-5``); the UI and
the API listen on the recipe's ``host:port`` (127.0.0.1:7860 by default) when ``source`` is ``live``;
``--share`` adds a public Gradio link (only with ``api_key_env`` set: the API trains the model).
"""

from __future__ import annotations

import sys

DEFAULT_RECIPE = "recipes/combine_qwen3_0.6b_lora.yaml"


def main(argv: list[str]) -> int:
    from openclaw_trl.cli import main as cli_main

    if "--config" not in argv:
        argv = ["--config", DEFAULT_RECIPE, *argv]
    return cli_main(["train", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
