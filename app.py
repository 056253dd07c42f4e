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

import os
import signal
import sys


def _stop_at_once(signum, frame):  # until openclaw_trl.stopping takes over, a few lines below
    os.write(2, b"openclaw-trl: stopped before training started; nothing was lost\n")
    os._exit(128 + signum)


if __name__ == "__main__":  # Ctrl-C or SIGTERM from the very start: no traceback
    signal.signal(signal.SIGINT, _stop_at_once)
    signal.signal(signal.SIGTERM, _stop_at_once)


def main(argv: list[str]) -> int:
    from openclaw_trl import stopping

    stopping.install()  # Ctrl-C and SIGTERM stop the command from here on, at any moment
    from openclaw_trl.cli import main as cli_main

    return cli_main(["train", *argv], command_prog="python app.py")


if __name__ == "__main__":
    code = main(sys.argv[1:])
    from openclaw_trl import stopping

    stopping.finish(code)  # atexit handlers, then exit without the slow teardown of torch's modules
