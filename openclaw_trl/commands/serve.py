"""``openclaw-trl serve``: the chat UI + OpenAI API, collecting every turn into the store.

Two ways to run it:

* ``openclaw-trl serve --config recipes/x.yaml [-- overrides]``: the full loop (engine, collector, scorer, trainer)
  built by :mod:`openclaw_trl.runtime` with ``source: live``, exactly what ``python app.py`` runs.
* ``openclaw-trl serve --model-dir DIR`` (``--model-dir tiny`` builds the offline tiny model): serve and collect
  only, no judge and no trainer. Useful to try the UI, to record conversations for a later ``replay``, and
  for the serving benchmark. :func:`openclaw_trl.serving_stack.build_serving` is that wiring in one call.

``--share`` opens a public Gradio tunnel to the whole app (the API included), so it refuses to run without
an API key (``--api-key-env``): a public endpoint that trains the model must not be anonymous. With a key,
the API wants ``Authorization: Bearer <key>`` and the UI a login whose password is the key.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from openclaw_trl.commands import train
from openclaw_trl.errors import UserError

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="RECIPE",
        help="recipe YAML: serve and train (the options below and the overrides after -- override it)",
    )
    parser.add_argument(
        "--model-dir", help="serve this model without training ('tiny' builds the offline tiny model)"
    )
    parser.add_argument("--store", default="outputs/serve/store.db", help="SQLite store (--model-dir mode)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument(
        "--model-name",
        default=None,
        help="model name the API serves (default openclaw; --config: the recipe's)",
    )
    parser.add_argument("--api-key-env", default=None, help="env var holding the bearer token of the API")
    parser.add_argument(
        "--max-context-len",
        type=int,
        default=None,
        help="prompt + reply tokens of a request (default: the model's own context; with --config it overrides "
        "the recipe's max_context_len)",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="default max_tokens of a request (--model-dir mode; 512)"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature of trainable turns (> 0) and the default of the others (0.7; --config: the "
        "recipe's temperature)",
    )
    parser.add_argument("--no-ui", action="store_true", help="API only, no Gradio UI at /")
    parser.add_argument("--share", action="store_true", help="public Gradio link (requires --api-key-env)")
    parser.add_argument(
        "overrides",
        nargs=argparse.REMAINDER,
        help="recipe fields to override after --, e.g. -- --learning_rate 1e-5 (every field: openclaw-trl fields)",
    )


def recipe_overrides(args: argparse.Namespace) -> list[str]:
    return args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides


def run(args: argparse.Namespace) -> int:
    overrides = recipe_overrides(args)
    if any(arg in ("-h", "--help") for arg in overrides):  # -- --help: the recipe fields, not TRL's list
        print(train.fields_summary())
        return 0
    if any(arg in train.HELP_FLAGS for arg in overrides):
        train.print_help(overrides, "openclaw-trl serve --config RECIPE --")
        return 0
    from openclaw_trl.console import configure_console

    configure_console()
    if bool(args.config) == bool(args.model_dir):
        raise UserError("give exactly one of --config RECIPE (serve + train) or --model-dir DIR (serve only)")
    if args.share and not args.api_key_env:
        raise UserError("--share exposes the API publicly: set --api-key-env to a variable holding a key")
    if args.config:
        return _run_recipe(args)

    from openclaw_trl.serving.app import ServerThread
    from openclaw_trl.serving.settings import ServerSettings

    model_dir = args.model_dir
    if model_dir == "tiny":
        from openclaw_trl.testing import build_tiny_model

        model_dir = Path(args.store).parent / "tiny-model"
        if not (model_dir / "config.json").exists():
            build_tiny_model(model_dir)
    settings = ServerSettings(
        host=args.host,
        port=args.port,
        model_names=[args.model_name or "openclaw"],
        api_key_env=args.api_key_env,
        max_context_len=args.max_context_len,
        default_max_tokens=args.max_tokens or 512,
        max_tokens_cap=max(args.max_tokens or 512, 4096),
        default_temperature=0.7 if args.temperature is None else args.temperature,
        train_temperature=0.7 if args.temperature is None else args.temperature,
        ui=not args.no_ui,
    )
    from openclaw_trl.console import serving_line
    from openclaw_trl.serving.app import open_share_link
    from openclaw_trl.serving_stack import build_serving

    serving = build_serving(model_dir, args.store, settings)
    server = ServerThread(serving.app, host=settings.host, port=settings.port).start()
    logger.info("%s", serving_line(str(model_dir), server.url, settings.ui, settings.model_names[0]))
    logger.info("collecting every turn into %s (no training); Ctrl-C stops", args.store)
    if args.share:
        logger.info("public link: %s", open_share_link(settings.host, server.port))
    from openclaw_trl.stopping import graceful

    try:
        with graceful():  # Ctrl-C and `kill` (SIGTERM) stop serving cleanly
            server.thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        serving.close()
    return 0


def _run_recipe(args: argparse.Namespace) -> int:
    """Serve + train from a recipe, through the same runtime as ``app.py`` (source forced to ``live``)."""
    from openclaw_trl import runtime as rt

    if args.max_tokens is not None:
        raise UserError(
            "--max-tokens applies to --model-dir; with --config set max_completion_length in the recipe "
            "(or -- --max_completion_length N)"
        )
    overrides = recipe_overrides(args)
    argv = [
        "--config",
        args.config,
        *overrides,
        "--source",
        "live",
        "--host",
        args.host,
        "--port",
        str(args.port),
    ]
    if args.api_key_env:
        argv += ["--api_key_env", args.api_key_env]
    if args.max_context_len is not None:
        argv += ["--max_context_len", str(args.max_context_len)]
    if args.temperature is not None:
        argv += ["--temperature", str(args.temperature)]
    if args.model_name is not None:
        argv += ["--served_model_name", args.model_name]
    from openclaw_trl.recipe_check import check_run_argv

    check_run_argv(argv)  # one line, before the model loads: a missing recipe, a wrong field, a taken port
    config, model_args, recipe_yaml = rt.load_recipe(argv)
    from openclaw_trl.console import configure_console

    configure_console(config.log_level)
    runtime = rt.build_runtime(config, model_args, recipe_yaml)
    rt.run(runtime, share=args.share)
    return 0
