"""Wiring for a run with several users (the recipe's ``users``): one base model, one adapter per user.

``build_users_runtime`` loads what is shared once (the tokenizer, the serving engine with ``max_adapters``
device slots, and for training the base model's weights, ``trainer.sharing.SharedBase``), then builds for
each user, from their config copy (``users.user_config``: ``<output_dir>/users/<name>/``), everything a run
with one user has: their store (brought to the checkpoint they continue from), their view of the engine
(``AdapterView``: ``policy`` is their adapter, published from their checkpoint before anything is served),
collector, scorer (the judge and the teacher read only their store), Best-of-N picker, learning control,
status and trainer. The trainers take turns on the device (``sharing.UpdateTurns``: round-robin among the
users with a ready batch).

``run_users`` starts the source (the server, whose bearer keys select the user, or one simulated user per
user) and one training thread per user; Ctrl-C or SIGTERM stops them all, each saving a checkpoint of its
last update, and the same command continues every user from there. A user's training that ends with an error
stops the run the same way, and the run then fails with that error: a server whose learning ended for one user
does not go on as if it learned.
"""

from __future__ import annotations

import logging
import threading

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.errors import UserError
from openclaw_trl.recipe import load_tokenizer, lora_config, resolve_model_path, set_model_init_kwargs
from openclaw_trl.run_parts import (
    Runtime,
    UserRuntime,
    learning_parts,
    prepare_start,
    share_publicly,
    sigterm_as_interrupt,
)
from openclaw_trl.sources import Simulation, start_simulation
from openclaw_trl.trainer import last_step_metrics
from openclaw_trl.trainer.progress import ProgressCallback, TrainingProgress
from openclaw_trl.users import UserKeys, user_config

logger = logging.getLogger(__name__)

STOP_JOIN_S = 300.0
"""How long stopping waits for each user's trainer to finish its update and save its checkpoint."""


def build_users_runtime(
    config: OpenClawConfig, model_args, recipe_yaml: str | None = None, train: bool = True, judge_fn=None
) -> Runtime:
    """Every component of a run with users (module docstring); ``Runtime.users`` holds each user's."""
    from accelerate import PartialState

    from openclaw_trl.engines import create_engine
    from openclaw_trl.engines.views import AdapterView
    from openclaw_trl.resume import checkpoint_to_resume
    from openclaw_trl.trainer import OpenClawTrainer
    from openclaw_trl.trainer.sharing import SharedBase, UpdateTurns

    if PartialState().num_processes > 1:
        raise UserError(
            "a run with users trains in one process (the users take turns on the device): launch it without "
            "several processes (python app.py, or accelerate launch --num_processes 1)"
        )
    model_path = resolve_model_path(model_args, config)
    peft_config = lora_config(model_args)
    tokenizer = load_tokenizer(model_path)
    names = ", ".join(spec.name for spec in config.user_specs)
    logger.info(
        "loading %s for serving (%s engine, users %s)", model_args.model_name_or_path, config.engine, names
    )
    engine = create_engine(
        config.engine, model_path, **config.engine_kwargs(lora_config=peft_config, dtype=model_args.dtype)
    )
    shared = turns = None
    if train:
        set_model_init_kwargs(config, model_args)
        shared = SharedBase.load(model_path, config.device, **dict(config.model_init_kwargs or {}))
        turns = UpdateTurns()
    users = []
    for spec in config.user_specs:
        ucfg = user_config(config, spec)
        ucfg.model_init_kwargs = None  # the model is built once (``shared``), not loaded per user
        store, start = prepare_start(ucfg)
        resume = checkpoint_to_resume(ucfg)
        view = AdapterView(engine, spec.name)
        if start.checkpoint:
            view.publish_adapter(start.checkpoint, version=start.step)
        progress = TrainingProgress()
        parts = learning_parts(ucfg, view, store, tokenizer, progress, judge_fn)
        trainer = None
        if train:
            trainer = OpenClawTrainer(
                model=shared.copy_for_user(),
                args=ucfg,
                store=store,
                engine=view,
                processing_class=tokenizer,
                peft_config=peft_config,
                recipe_yaml=recipe_yaml,
                learning=parts.learning,
                update_turns=turns,
                user_name=spec.name,
            )
            trainer.add_callback(ProgressCallback(progress))
        users.append(
            UserRuntime(
                spec.name,
                ucfg,
                store,
                view,
                parts.collector,
                parts.scorer,
                parts.best_of_n,
                parts.learning,
                parts.status,
                trainer,
                progress,
                resume,
            )
        )
    return Runtime(
        config, model_args.model_name_or_path, model_path, tokenizer, engine=engine, users=tuple(users)
    )


def start_users_server(runtime: Runtime, port: int | None = None, ui: bool = True):
    """The server of a run with users (``serving.app.create_users_app``) in a background thread."""
    from openclaw_trl.console import serving_line, uvicorn_log_level
    from openclaw_trl.serving.app import ServerThread, UserParts, create_users_app

    config = runtime.config
    settings = config.server_settings(port=port, ui=ui, model_id=runtime.model_name)
    parts = [
        UserParts(u.name, u.engine, u.collector, u.store, u.status, u.best_of_n, u.learning)
        for u in runtime.users
    ]
    app = create_users_app(parts, UserKeys(config.user_specs), settings)
    server = runtime.threads.serve(
        ServerThread(
            app, host=settings.host, port=settings.port, log_level=uvicorn_log_level(config.log_level)
        ).start()
    )
    logger.info(
        "%s", serving_line(runtime.model_name or runtime.model_path, server.url, ui, settings.model_names[0])
    )
    logger.info("each user's bearer key selects their adapter: %s", ", ".join(u.name for u in runtime.users))
    return server


def start_users_source(runtime: Runtime, share: bool = False) -> None:
    """Each user's scorer, then the server (``live``) or the server and one simulated user per user, each
    sending that user's key (``simulated``)."""
    import os

    config = runtime.config
    for user in runtime.users:
        user.scorer.start()
    if config.source == "live":
        start_users_server(runtime)
        if share:
            share_publicly(runtime)
        return
    url = start_users_server(runtime, port=0, ui=False).url
    for spec, user in zip(config.user_specs, runtime.users, strict=True):
        simulation = Simulation.from_config(user.config)
        simulation = Simulation(**{**vars(simulation), "api_key": os.environ[spec.api_key_env].strip()})
        fail = user.store.queue.fail_waiters
        runtime.threads.add(start_simulation(simulation, url, runtime.stop_event, fail))


def run_users(runtime: Runtime, share: bool = False) -> dict[str, dict]:
    """Serve and train every user until each reaches ``max_steps`` (or Ctrl-C / SIGTERM); returns each
    user's last metrics by name."""
    if share and runtime.config.source != "live":
        raise UserError("--share needs source: live")
    start_users_source(runtime, share)
    results: dict[str, dict] = {}
    failures: dict[str, BaseException] = {}
    threads = [
        threading.Thread(
            target=_train_user,
            args=(user, results, failures),
            name=f"openclaw-train-{user.name}",
            daemon=True,
        )
        for user in runtime.users
    ]
    for thread in threads:
        thread.start()
    try:
        with sigterm_as_interrupt():
            while any(thread.is_alive() for thread in threads) and not failures:
                for thread in threads:
                    thread.join(timeout=0.2)
    except KeyboardInterrupt:
        logger.info("stopping: each user's last update is saved")
    finally:
        stop_users(runtime)
        for thread in threads:
            thread.join(timeout=STOP_JOIN_S)
        runtime.close()
    if failures:
        name, err = next(iter(failures.items()))
        raise RuntimeError(
            f"the training of user {name} ended with an error ({type(err).__name__}: {err}); the run stops so "
            "that no user is left without learning: every user's last update is saved, and the same command "
            "continues them"
        ) from err
    return results


def stop_users(runtime: Runtime) -> None:
    """Ask every user's trainer to stop between two updates, and wake those waiting for samples or paused."""
    runtime.stop_event.set()
    for user in runtime.users:
        if user.trainer is not None:
            user.trainer.request_stop()
        if user.learning is not None:
            user.learning.stop()
        user.store.queue.fail_waiters("the run is stopping")


def _train_user(user: UserRuntime, results: dict, failures: dict) -> None:
    """One user's training thread: train from their checkpoint until ``max_steps`` or a stop; then save a
    checkpoint of their last update and their run information, whatever ended it. An error that was not a stop
    goes into ``failures`` (the run then stops every user: one user's learning never ends silently)."""
    from openclaw_trl.store.queue import SampleSourceError
    from openclaw_trl.trainer.trainer import StopTraining

    trainer = user.trainer
    try:
        trainer.resume_from(user.resume)
    except (StopTraining, SampleSourceError) as err:
        if not trainer.stop_requested:
            logger.error("user %s: training stopped: %s", user.name, err)
            failures[user.name] = err
    except Exception as err:
        logger.exception("user %s: training failed; their last checkpoint is kept", user.name)
        failures[user.name] = err
    finally:
        trainer.end_turn()
        try:
            checkpoint = trainer.save_checkpoint()
            trainer.save_model(user.config.output_dir)
            trainer.write_run_info()
            if checkpoint:
                logger.info(
                    "user %s: stopped at v%d, kept in %s", user.name, trainer.state.global_step, checkpoint
                )
        except Exception:
            logger.exception("user %s: saving the last checkpoint failed", user.name)
        results[user.name] = last_step_metrics(trainer.state.log_history)
