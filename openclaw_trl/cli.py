"""The ``openclaw-trl`` command: ``serve / train / merge / push / export / eval / compare / fields``.

Each subcommand lives in its own module, which exposes ``add_arguments(parser)`` and ``run(args)``
(or ``run_argv(argv)`` when it parses a recipe itself with TRL's ``TrlParser``);
the module is imported only when its subcommand runs, so ``openclaw-trl --help`` stays fast.
A :class:`~openclaw_trl.errors.UserError` raised anywhere below is printed here, on one line, with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from openclaw_trl import stopping
from openclaw_trl.errors import UserError

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": (
        "openclaw_trl.commands.serve",
        "serve a recipe (chat UI + OpenAI API, learning from live turns), or a model directory (serve and record only)",
    ),
    "train": (
        "openclaw_trl.commands.train",
        "run a recipe as python app.py does: live (UI + API), replayed or simulated conversations",
    ),
    "merge": (
        "openclaw_trl.commands.merge",
        "write a new model: the base with a LoRA adapter merged in (both left unchanged)",
    ),
    "push": ("openclaw_trl.commands.push", "push an adapter or merged model to the Hugging Face Hub"),
    "export": ("openclaw_trl.commands.export", "export collected conversations and samples as a dataset"),
    "eval": ("openclaw_trl.commands.eval", "simulated-user evaluation against a running server"),
    "compare": (
        "openclaw_trl.commands.compare",
        "did it learn for me? recent prompts answered by two adapter versions, side by side",
    ),
    "fields": ("openclaw_trl.commands.fields", "every recipe field: its type, default and meaning"),
}
DESCRIPTION = (
    "Train your own chat model by talking to it: serve it, learn from the conversations, ship the result."
)
EPILOG = (
    "'openclaw-trl COMMAND --help' shows a command's options. 'python app.py' is 'openclaw-trl train': "
    "with no --config it starts the default recipe, or the offline toy demo when the default model "
    "cannot be fetched."
)


def quiet_openmp() -> None:
    """Let idle OpenMP threads sleep instead of spinning (unless the user set ``OMP_WAIT_POLICY``).

    The engine's decode loop, the server threads and the trainer share the CPU cores; with OpenMP's
    default spin-wait, HF decoding was measured ~10x slower on 2 cores. It must be set before torch loads.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv: list[str] | None = None, command_prog: str | None = None) -> int:
    """Run ``argv`` (``COMMAND [options]``); ``command_prog`` names the command in its help
    (``python app.py`` for ``app.py``; default ``openclaw-trl COMMAND``). Run as the program (``argv`` None),
    it takes over Ctrl-C and SIGTERM and ends the process when the command has finished
    (:mod:`openclaw_trl.stopping`); called with ``argv``, it leaves the caller's signal handling alone and
    returns the exit code."""
    if argv is None:
        stopping.install()
        stopping.finish(main(sys.argv[1:], command_prog))  # the command has finished: exit now
    quiet_openmp()
    argv = list(argv)
    parser = argparse.ArgumentParser(prog="openclaw-trl", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser.print_help() if not argv or argv[0] in ("-h", "--help") else parser.error(
            f"unknown command {argv[0]!r}"
        )
        return 0
    name, rest = argv[0], argv[1:]
    prog = command_prog or f"openclaw-trl {name}"
    try:
        return _dispatch(name, rest, prog)
    except UserError as err:
        print(f"openclaw-trl {name}: error: {err}", file=sys.stderr)
        return 2


def _dispatch(name: str, rest: list[str], prog: str) -> int:
    module = importlib.import_module(COMMANDS[name][0])
    if hasattr(module, "run_argv"):  # recipe commands parse their own arguments with TRL's TrlParser
        return int(module.run_argv(rest, prog=prog) or 0)
    command_parser = argparse.ArgumentParser(prog=prog, description=COMMANDS[name][1], add_help=False)
    module.add_arguments(command_parser)
    command_parser.add_argument("-h", "--help", action="help", help="show this help and exit")
    args = command_parser.parse_args(rest)
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
