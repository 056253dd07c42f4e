"""Wiring: one process holds the engine, the stores, the collectors, the scorers, the server and the trainers.

``load_recipe(argv)`` parses a recipe YAML (plus command-line overrides, :mod:`openclaw_trl.recipe`);
``build_runtime`` creates every component in order and returns them complete in a :class:`Runtime`: what
the users share (the tokenizer, the serving engine and, with several users, the base weights) and one
``UserRuntime`` per user (``build_user``). A recipe without ``users`` has one user, named None, built,
served and trained by the same functions as each user of a recipe with ``users``. ``run`` starts what the
``source`` needs (:mod:`openclaw_trl.sources`) and trains every user (:mod:`openclaw_trl.run_training`):

* ``live``: the UI + API listen on ``host:port``; people chat; the trainers wait for judged samples.
* ``simulated``: the same server, bound to a free local port, and one simulated user per user
  (``simulated_user``, sending that user's key) that talks to it over HTTP in a background thread.
* ``replay``: recorded conversations (``replay_path``, JSONL) go through the same collector and scorer
  (all judged before training starts, so a replay run is reproducible).

The recipe's config is never changed after parsing: what a run derives from it (each user's folder, store and
run name, ``users.UserPlan``; the trainer's model loading, ``recipe.model_init_kwargs``) goes into the config
each user is built from (``users.user_args``).

Threads: the scorers own their judging threads; the server thread and the source threads that ``run`` starts
belong to ``Runtime.threads`` (:class:`RunThreads`), which stops and joins them when the run ends. The
status route and the UI's learning panel read a user's :class:`~openclaw_trl.status.LearningStatus`, to
which their trainer pushes what it logs (never the trainer).

Only the main process owns the stores, serves and scores; under ``accelerate launch`` / ``torchrun`` with
several processes (a run without ``users`` only) each rank trains on its slice of the batch the main process
takes (see ``OpenClawTrainer._take_batch``).

Each user continues from the latest checkpoint of their ``output_dir`` (``openclaw_trl.resume``): the
resumed adapter is published to the engine before anything is served, so the first turns already carry its
policy version. Ctrl-C and SIGTERM end training with a checkpoint of each user's last update.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.console import learning_line, serving_line, uvicorn_log_level
from openclaw_trl.errors import UserError
from openclaw_trl.recipe import (
    load_recipe,  # noqa: F401 - re-exported: runtime.load_recipe(argv)
    load_tokenizer,
    lora_config,
    model_init_kwargs,
    resolve_model_path,
)
from openclaw_trl.run_parts import (  # noqa: F401 - RunThreads, Runtime, UserRuntime: re-exported
    RunThreads,
    Runtime,
    SharedParts,
    UserRuntime,
    learning_parts,
    prepare_start,
    share_publicly,
)
from openclaw_trl.run_training import train_users
from openclaw_trl.sources import Simulation, replay_and_judge, start_simulation
from openclaw_trl.trainer.progress import ProgressCallback, TrainingProgress
from openclaw_trl.users import UserKeys, UserPlan, plan_users, user_args

if TYPE_CHECKING:
    from openclaw_trl.serving.app import ServerThread

logger = logging.getLogger(__name__)


def build_runtime(
    config: OpenClawConfig, model_args, recipe_yaml: str | None = None, train: bool = True, judge_fn=None
) -> Runtime:
    """Create every component for ``config`` in order (the trainers only when ``train``) and return them.
    ``judge_fn``: a callable judge object for the scorers, in place of the recipe's judge (a program that
    builds its run in Python, e.g. with a simulated judge).

    The main process opens each user's store (at the checkpoint they continue from) and builds the engine;
    then every user is built (``build_user``). With ``users`` the base weights are loaded once and shared
    by the users' trainers, which take turns on the device; without, the trainer loads the model itself, and
    every process of a multi-process launch loads the same checkpoint and builds its trainer.
    """
    from accelerate import PartialState

    from openclaw_trl.engines import create_engine

    state = PartialState()
    several = bool(config.users)  # one adapter per user over one shared base
    if several and state.num_processes > 1:
        raise UserError(
            "a run with users trains in one process (the users take turns on the device): launch it without "
            "several processes (python app.py, or accelerate launch --num_processes 1)"
        )
    main = state.is_main_process
    init_kwargs = model_init_kwargs(config, model_args)
    plans = plan_users(config)
    # a shared base is built once, so the users' trainers get a model, not the kwargs to load one
    configs = [user_args(config, plan, None if several else init_kwargs) for plan in plans]
    opened = [prepare_start(c) if main else (None, None) for c in configs]
    if main:
        resolve_model_path(model_args, config)  # builds the tiny test model once, before the others read it
    state.wait_for_everyone()
    model_path = resolve_model_path(model_args, config)
    peft_config = lora_config(model_args)
    tokenizer = load_tokenizer(model_path)
    engine = None
    if main:
        names = f", users {', '.join(p.name for p in plans)}" if several else ""
        logger.info(
            "loading %s for serving (%s engine%s)", model_args.model_name_or_path, config.engine, names
        )
        kwargs = config.engine_kwargs(lora_config=peft_config, dtype=model_args.dtype)
        engine = create_engine(config.engine, model_path, **kwargs)
    base = turns = None
    if train and several:
        from openclaw_trl.trainer.sharing import SharedBase, UpdateTurns

        base = SharedBase.load(model_path, config.device, **(init_kwargs or {}))
        turns = UpdateTurns()
    shared = SharedParts(
        model_path, tokenizer, engine, peft_config, base, turns, train, recipe_yaml, judge_fn
    )
    users = tuple(
        build_user(ucfg, plan, shared, store, start)
        for ucfg, plan, (store, start) in zip(configs, plans, opened, strict=True)
    )
    return Runtime(config, model_args.model_name_or_path, model_path, tokenizer, engine=engine, users=users)


def build_user(config: OpenClawConfig, plan: UserPlan, shared: SharedParts, store, start) -> UserRuntime:
    """One user's components. ``config``: the one they are built from (``users.user_args``); ``store`` and
    ``start``: their store and where it starts (``prepare_start``; None on the other processes of a
    multi-process launch, which build only the trainer).

    A named user serves through their ``AdapterView`` of the shared engine, the run's only user through the
    engine itself; their adapter is published from the checkpoint they continue from before anything is
    served. Then their collector, scorer, Best-of-N picker, learning control and status
    (``learning_parts``), and with ``shared.train`` their trainer: over a copy of the shared base
    (``shared.base``) or over the model it loads from ``shared.model_path``, its logged metrics going to
    their ``progress``.
    """
    from openclaw_trl.resume import checkpoint_to_resume

    resume = checkpoint_to_resume(config)  # every process loads the same one
    engine = shared.engine
    if engine is not None and plan.name is not None:
        from openclaw_trl.engines.views import AdapterView

        engine = AdapterView(engine, plan.name)
    if start is not None and start.checkpoint:
        engine.publish_adapter(start.checkpoint, version=start.step)
    progress = TrainingProgress()
    parts = None
    if store is not None:
        parts = learning_parts(config, engine, store, shared.tokenizer, progress, shared.judge_fn)
    trainer = None
    if shared.train:
        from openclaw_trl.trainer import OpenClawTrainer

        if store is not None:
            logger.info("preparing the trainer%s (method %s)", _of(plan.name), config.method)
        trainer = OpenClawTrainer(
            model=shared.base.copy_for_user() if shared.base is not None else shared.model_path,
            args=config,
            store=store,
            engine=engine,
            processing_class=shared.tokenizer,
            peft_config=shared.peft_config,
            recipe_yaml=shared.recipe_yaml,
            learning=parts.learning if parts else None,
            update_turns=shared.turns,
            user_name=plan.name,
        )
        trainer.add_callback(ProgressCallback(progress))
    return UserRuntime(
        plan.name,
        config,
        store,
        engine,
        **(vars(parts) if parts is not None else {}),
        trainer=trainer,
        progress=progress,
        resume=resume,
        api_key_env=plan.api_key_env,
    )


def start_server(runtime: Runtime, port: int | None = None, ui: bool = True) -> ServerThread:
    """The FastAPI app (+ Gradio UI) in a background uvicorn thread, owned by ``runtime.threads``; returns it.
    Each user is a tenant of the server: with ``users`` the request's bearer key selects them."""
    from openclaw_trl.serving.app import ServerThread, UserParts, create_tenants_app

    config = runtime.config
    settings = config.server_settings(port=port, ui=ui, model_id=runtime.model_name)
    logger.info("starting the server (%s)", "UI and API" if ui else "API")
    parts = [
        UserParts(u.name, u.engine, u.collector, u.store, u.status, u.best_of_n, u.learning)
        for u in runtime.users
    ]
    keys = UserKeys(config.user_specs) if config.users else None
    app = create_tenants_app(parts, settings, keys)
    log_level = uvicorn_log_level(config.log_level)
    server = runtime.threads.serve(
        ServerThread(app, host=settings.host, port=settings.port, log_level=log_level).start()
    )
    model = runtime.model_name or runtime.model_path
    logger.info("%s", serving_line(model, server.url, ui, settings.model_names[0]))
    if keys is not None:
        logger.info("each user's bearer key selects their adapter: %s", ", ".join(p.name for p in parts))
    from openclaw_trl.trainer.reporting import METRICS_FILE

    for user in runtime.users:
        if user.trainer is None:
            continue
        who = "" if user.name is None else f"user {user.name}: "
        metrics = Path(user.config.output_dir) / METRICS_FILE
        logger.info("%s%s", who, learning_line(user.config, metrics))
        if user.learning is not None and user.learning.paused:
            logger.info(
                "%slearning is paused (kept from the last run): resume it in the UI or POST /v1/learning", who
            )
    return server


def run(runtime: Runtime, share: bool = False) -> dict[str | None, dict]:
    """Start the source and the scorers, and train every user until ``max_steps`` (or Ctrl-C); returns each
    user's last metrics by name (the run's only user's under None).

    ``share`` (live source only) also opens a public Gradio link to the UI and API.
    """
    config = runtime.config
    if share and (config.source != "live" or not (config.api_key_env or config.users)):
        raise UserError(
            "--share needs source: live and api_key_env (a public endpoint must not be anonymous)"
        )
    if runtime.engine is not None:  # the main process
        start_source(runtime, share)
    try:
        return train_users(runtime)
    finally:
        runtime.close()


def start_source(runtime: Runtime, share: bool = False) -> None:
    """The scorers and the ``source``'s turns: the recorded ones replayed and judged first, or the server
    (``live``; with ``share`` a public link too), or the server and one simulated user per user, each sending
    that user's key (``simulated``)."""
    config = runtime.config
    if config.source == "replay":  # a recipe with users refuses it: the recorded turns name no user
        user = runtime.user
        replay_and_judge(
            config.replay_path,
            runtime.tokenizer,
            user.engine,
            user.collector,
            user.scorer,
            config.temperature,
        )
    for user in runtime.users:
        user.scorer.start()
    if config.source == "live":
        start_server(runtime)
        if share:
            share_publicly(runtime)
    elif config.source == "simulated":
        url = start_server(runtime, port=0, ui=False).url
        for user in runtime.users:
            key = os.environ.get(user.api_key_env, "").strip() if user.api_key_env else ""
            simulation = Simulation.from_config(user.config, api_key=key or None)
            fail = (
                user.store.queue.fail_waiters
            )  # a crashed simulation ends the trainer's wait with its error
            runtime.threads.add(start_simulation(simulation, url, runtime.stop_event, fail))


def _of(name: str | None) -> str:
    return "" if name is None else f" of user {name}"
