"""Wiring: one process holds the engine, the store, the collector, the scorer, the server and the trainer.

``load_recipe(argv)`` parses a recipe YAML (plus command-line overrides, :mod:`openclaw_trl.recipe`);
``build_runtime`` creates every component in order and returns them complete in a :class:`Runtime`;
``run`` starts what the ``source`` needs (:mod:`openclaw_trl.sources`) and trains:

* ``live``: the UI + API listen on ``host:port``; people chat; the trainer waits for judged samples.
* ``simulated``: the same server, bound to a free local port, and a simulated user
  (``simulated_user``) that talks to it over HTTP in a background thread.
* ``replay``: recorded conversations (``replay_path``, JSONL) go through the same collector and scorer
  (all judged before training starts, so a replay run is reproducible).

Threads: the trainer trains on the caller's thread; the scorer owns its judging thread; the server thread
and the source threads that ``run`` starts belong to ``Runtime.threads`` (:class:`RunThreads`), which stops
and joins them when the run ends. The status route and the UI's learning panel read a
:class:`~openclaw_trl.status.LearningStatus`, to which the trainer pushes what it logs (never the trainer).

Only the main process owns the store, serves and scores; under ``accelerate launch`` / ``torchrun`` with
several processes each rank trains on its slice of the batch the main process takes
(see ``OpenClawTrainer._take_batch``).

A run continues from the latest checkpoint of its ``output_dir`` (``openclaw_trl.resume``): the resumed
adapter is published to the engine before anything is served, so the first turns already carry its
policy version. Ctrl-C and SIGTERM end training with a checkpoint of the last update.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.console import learning_line, serving_line, uvicorn_log_level
from openclaw_trl.errors import UserError
from openclaw_trl.recipe import (
    load_recipe,  # noqa: F401 - re-exported: runtime.load_recipe(argv)
    load_tokenizer,
    lora_config,
    resolve_model_path,
    set_model_init_kwargs,
)
from openclaw_trl.run_parts import (  # noqa: F401 - RunThreads, Runtime, prepare_start: re-exported
    RunThreads,
    Runtime,
    learning_parts,
    prepare_start,
    share_publicly,
    sigterm_as_interrupt,
)
from openclaw_trl.sources import Simulation, replay_and_judge, start_simulation
from openclaw_trl.trainer import last_step_metrics
from openclaw_trl.trainer.progress import ProgressCallback, TrainingProgress

if TYPE_CHECKING:
    from openclaw_trl.serving.app import ServerThread

logger = logging.getLogger(__name__)


def build_runtime(
    config: OpenClawConfig, model_args, recipe_yaml: str | None = None, train: bool = True, judge_fn=None
) -> Runtime:
    """Create every component for ``config`` in order (the trainer only when ``train``) and return them.
    ``judge_fn``: a callable judge object for the scorer, in place of the recipe's judge (a program that
    builds its run in Python, e.g. with a simulated judge).

    The main process opens the store (at the checkpoint the run continues from), builds the engine (serving
    the resumed adapter from the first request on), the collector, the scorer, the Best-of-N picker, the
    learning control and the status; every process loads the same checkpoint and builds its trainer, whose
    logged metrics go to ``progress``.
    """
    if config.users:
        from openclaw_trl.users_runtime import build_users_runtime

        return build_users_runtime(config, model_args, recipe_yaml, train, judge_fn)
    from accelerate import PartialState

    from openclaw_trl.engines import create_engine
    from openclaw_trl.resume import checkpoint_to_resume
    from openclaw_trl.trainer import OpenClawTrainer

    state = PartialState()
    main = state.is_main_process
    store, start = prepare_start(config) if main else (None, None)
    if main:
        resolve_model_path(model_args, config)  # builds the tiny test model once, before the others read it
    state.wait_for_everyone()
    resume = checkpoint_to_resume(config)  # every process loads the same one
    model_path = resolve_model_path(model_args, config)
    peft_config = lora_config(model_args)
    tokenizer = load_tokenizer(model_path)
    progress = TrainingProgress()
    engine = collector = scorer = best_of_n = learning = status = None
    if main:
        logger.info("loading %s for serving (%s engine)", model_args.model_name_or_path, config.engine)
        kwargs = config.engine_kwargs(lora_config=peft_config, dtype=model_args.dtype)
        engine = create_engine(config.engine, model_path, **kwargs)
        if start.checkpoint:
            engine.publish_adapter(start.checkpoint, version=start.step)
        parts = learning_parts(config, engine, store, tokenizer, progress, judge_fn)
        collector, scorer, best_of_n = parts.collector, parts.scorer, parts.best_of_n
        learning, status = parts.learning, parts.status
    trainer = None
    if train:
        if main:
            logger.info("preparing the trainer (method %s)", config.method)
        set_model_init_kwargs(config, model_args)
        trainer = OpenClawTrainer(
            model=model_path,
            args=config,
            store=store,
            engine=engine,
            processing_class=tokenizer,
            peft_config=peft_config,
            recipe_yaml=recipe_yaml,
            learning=learning,
        )
        trainer.add_callback(ProgressCallback(progress))
    return Runtime(
        config,
        model_args.model_name_or_path,
        model_path,
        tokenizer,
        store=store,
        engine=engine,
        collector=collector,
        scorer=scorer,
        best_of_n=best_of_n,
        learning=learning,
        status=status,
        trainer=trainer,
        progress=progress,
        resume=resume,
    )


def start_server(runtime: Runtime, port: int | None = None, ui: bool = True) -> ServerThread:
    """The FastAPI app (+ Gradio UI) in a background uvicorn thread, owned by ``runtime.threads``; returns it."""
    if runtime.users:
        from openclaw_trl.users_runtime import start_users_server

        return start_users_server(runtime, port, ui)
    from openclaw_trl.serving.app import ServerThread, create_app

    settings = runtime.config.server_settings(port=port, ui=ui, model_id=runtime.model_name)
    logger.info("starting the server (%s)", "UI and API" if ui else "API")
    app = create_app(
        runtime.engine,
        runtime.collector,
        runtime.store,
        settings,
        status=runtime.status,
        best_of_n=runtime.best_of_n,
        learning=runtime.learning,
    )
    log_level = uvicorn_log_level(runtime.config.log_level)
    server = runtime.threads.serve(
        ServerThread(app, host=settings.host, port=settings.port, log_level=log_level).start()
    )
    model = runtime.model_name or runtime.model_path
    logger.info("%s", serving_line(model, server.url, ui, settings.model_names[0]))
    if runtime.trainer is not None:
        from openclaw_trl.trainer.reporting import METRICS_FILE

        logger.info("%s", learning_line(runtime.config, Path(runtime.config.output_dir) / METRICS_FILE))
        if runtime.learning is not None and runtime.learning.paused:
            logger.info(
                "learning is paused (kept from the last run): resume it in the UI or POST /v1/learning"
            )
    return server


def run(runtime: Runtime, share: bool = False) -> dict:
    """Start the source, the scorer and train until ``max_steps`` (or Ctrl-C); returns the last metrics.

    ``share`` (live source only) also opens a public Gradio link to the UI and API.
    """
    if runtime.users:
        from openclaw_trl.users_runtime import run_users

        return run_users(runtime, share)
    config, trainer = runtime.config, runtime.trainer
    if share and (config.source != "live" or not config.api_key_env):
        raise UserError(
            "--share needs source: live and api_key_env (a public endpoint must not be anonymous)"
        )
    if runtime.scorer is not None:  # the main process
        start_source(runtime, share)
    try:
        with sigterm_as_interrupt():
            trainer.resume_from(runtime.resume)
    except KeyboardInterrupt:
        if trainer.state.global_step:
            logger.info("stopping after update %d: saving a checkpoint", trainer.state.global_step)
        else:
            logger.info("stopped before the first update: nothing to save")
    finally:
        runtime.stop_event.set()
        checkpoint = trainer.save_checkpoint()
        trainer.save_model(config.output_dir)
        if trainer.accelerator.is_main_process:  # the store's totals are the main process's
            trainer.write_run_info()
            if checkpoint:
                again = "" if config.fresh_start else ": the same command continues from there"
                logger.info("stopped at v%d, kept in %s%s", trainer.state.global_step, checkpoint, again)
        runtime.close()
    return last_step_metrics(trainer.state.log_history)


def start_source(runtime: Runtime, share: bool = False) -> None:
    """The scorer and the ``source``'s turns: the recorded ones replayed and judged first, or the server
    (``live``; with ``share`` a public link too), or the server and the simulated user's thread."""
    config = runtime.config
    if config.source == "replay":
        replay_and_judge(
            config.replay_path,
            runtime.tokenizer,
            runtime.engine,
            runtime.collector,
            runtime.scorer,
            config.temperature,
        )
    runtime.scorer.start()
    if config.source == "live":
        start_server(runtime)
        if share:
            share_publicly(runtime)
    elif config.source == "simulated":
        url = start_server(runtime, port=0, ui=False).url
        simulation = Simulation.from_config(config)
        fail = runtime.store.queue.fail_waiters  # a crashed simulation ends the trainer's wait with its error
        runtime.threads.add(start_simulation(simulation, url, runtime.stop_event, fail))
