"""Training the users of a run until each reaches ``max_steps`` (or Ctrl-C / SIGTERM), and what ends it.

``train_users`` trains the run's only user on the caller's thread (so the processes of a multi-process launch
stay in step, and Ctrl-C ends the update at once), and several users one training thread each: their
trainers take turns on the device (``trainer.sharing.UpdateTurns``), and Ctrl-C or SIGTERM asks each to stop
after its current update. Whatever ends a user's training, ``train_user`` saves a checkpoint of their last
update, their adapter and their run information, so the same command continues every user from there. A
user's training that ends with an error stops every user the same way, and the run then fails with that
error: a server whose learning ended for one user does not go on as if it learned.
"""

from __future__ import annotations

import logging
import threading

from openclaw_trl.run_parts import Runtime, UserRuntime, sigterm_as_interrupt
from openclaw_trl.trainer import last_step_metrics

logger = logging.getLogger(__name__)

STOP_JOIN_S = 300.0
"""How long stopping waits for each user's trainer to finish its update and save its checkpoint."""


def train_users(runtime: Runtime) -> dict[str | None, dict]:
    """Train every user of ``runtime`` (module docstring); returns each user's last metrics by name."""
    if len(runtime.users) == 1:
        user = runtime.users[0]
        with sigterm_as_interrupt():
            return {user.name: train_user(user)}
    results: dict[str | None, dict] = {}
    failures: dict[str | None, BaseException] = {}
    threads = [
        threading.Thread(
            target=_train_in_thread,
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
        if user.store is not None:
            user.store.queue.fail_waiters("the run is stopping")


def train_user(user: UserRuntime) -> dict:
    """Train ``user`` from their checkpoint until ``max_steps``, Ctrl-C (on the main thread) or a stop
    (``request_stop``); then, whatever ended it, save a checkpoint of their last update, their adapter and
    their run information. Returns their last metrics; an error that was not a stop is raised (after saving)."""
    from openclaw_trl.store.queue import SampleSourceError
    from openclaw_trl.trainer.intake import StopTraining

    trainer = user.trainer
    try:
        trainer.resume_from(user.resume)
    except KeyboardInterrupt:
        if trainer.state.global_step:
            logger.info(
                "%sstopping after update %d: saving a checkpoint", _who(user), trainer.state.global_step
            )
        else:
            logger.info("%sstopped before the first update: nothing to save", _who(user))
    except (StopTraining, SampleSourceError):
        if not trainer.stop_requested:
            raise
    finally:
        trainer.end_turn()
        checkpoint = trainer.save_checkpoint()
        trainer.save_model(user.config.output_dir)
        if trainer.accelerator.is_main_process:  # the store's totals are the main process's
            trainer.write_run_info()
            if checkpoint:
                again = "" if user.config.fresh_start else ": the same command continues from there"
                step = trainer.state.global_step
                logger.info("%sstopped at v%d, kept in %s%s", _who(user), step, checkpoint, again)
    return last_step_metrics(trainer.state.log_history)


def _train_in_thread(user: UserRuntime, results: dict, failures: dict) -> None:
    """One user's training thread (``train_user``): their metrics go into ``results``, an error into
    ``failures`` (the run then stops every user: one user's learning never ends silently)."""
    try:
        results[user.name] = train_user(user)
    except Exception as err:
        logger.exception("user %s: training failed; their last checkpoint is kept", user.name)
        failures[user.name] = err
        results[user.name] = last_step_metrics(user.trainer.state.log_history)


def _who(user: UserRuntime) -> str:
    """The prefix naming a user in a log line ("" for the run's only user)."""
    return "" if user.name is None else f"user {user.name}: "
