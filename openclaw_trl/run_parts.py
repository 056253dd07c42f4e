"""The parts every run is made of: its threads (``RunThreads``), what its users share (``SharedParts``), each
user's components (``UserRuntime``) and the whole run (``Runtime``: the shared parts and a tuple of users),
where a user's store starts (``prepare_start``) and SIGTERM as Ctrl-C (``sigterm_as_interrupt``)."""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.status import LearningStatus
from openclaw_trl.trainer.progress import TrainingProgress

if TYPE_CHECKING:
    from openclaw_trl.engines import Engine
    from openclaw_trl.judging import BestOfN, Scorer
    from openclaw_trl.serving.app import ServerThread
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.store import Store
    from openclaw_trl.trainer import OpenClawTrainer
    from openclaw_trl.trainer.control import LearningControl

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SharedParts:
    """What every user of a run is built from: the model's files (``model_path``), tokenizer and LoRA settings,
    the serving engine (None on the other processes of a multi-process launch), and for training the base
    weights that several users share (``base``, a ``trainer.sharing.SharedBase``; None: the trainer loads the
    model from ``model_path``) and their turns to update (``turns``, a ``trainer.sharing.UpdateTurns``; None
    for the run's only user). ``train`` False builds no trainer. ``judge_fn``: a judge object for the scorers
    in place of the recipe's."""

    model_path: str
    tokenizer: object
    engine: Engine | None
    peft_config: object = None
    base: object = None
    turns: object = None
    train: bool = True
    recipe_yaml: str | None = None
    judge_fn: object = None


@dataclass(frozen=True)
class UserRuntime:
    """One user's components: their name (None: the run's only user), the config they are built from
    (``users.user_args``: their folder, store and run name), store, engine (the shared engine, or a named
    user's ``AdapterView`` of it), collector, scorer, Best-of-N picker, learning control, status, trainer and
    what it logged. The store, the collector, the scorer, the Best-of-N picker, the learning control and the
    status exist only in the main process (None on the other processes of a multi-process launch);
    ``trainer`` is None when built without training."""

    name: str | None
    config: OpenClawConfig
    store: Store | None
    engine: Engine | None
    collector: TurnCollector | None = None
    scorer: Scorer | None = None
    best_of_n: BestOfN | None = None
    learning: LearningControl | None = None
    status: LearningStatus | None = None  # called by /v1/status and the UI's learning panel
    trainer: OpenClawTrainer | None = None
    progress: TrainingProgress = field(default_factory=TrainingProgress)
    resume: str | None = None  # the checkpoint their trainer continues (None: a new run); the recipe's
    # ``resume_from_checkpoint`` when set, else the latest complete one in their ``output_dir``
    api_key_env: str | None = (
        None  # the environment variable holding their key (their simulated user sends it)
    )


class RunThreads:
    """The threads a run starts, in one place: the server (``serve``) and the sources' threads (``add``).

    ``close`` sets ``stop_event`` (the sources stop at their next check), joins the source threads (30 s
    each at most: they are daemons) and stops the server. Closing twice is harmless.
    """

    def __init__(self):
        self.stop_event = threading.Event()
        self.server: ServerThread | None = None
        self._threads: list[threading.Thread] = []

    def add(self, thread: threading.Thread) -> threading.Thread:
        self._threads.append(thread)
        return thread

    def serve(self, server: ServerThread) -> ServerThread:
        self.server = server
        return server

    def close(self) -> None:
        self.stop_event.set()
        for thread in self._threads:
            thread.join(timeout=30)
        if self.server is not None:
            self.server.stop()


@dataclass(frozen=True)
class Runtime:
    """One run, complete when :func:`~openclaw_trl.runtime.build_runtime` returns: the recipe as parsed
    (``config``, never changed), the model, the tokenizer, the serving engine (shared by every user; None on
    the other processes of a multi-process launch), its users (one ``UserRuntime`` each; a recipe without
    ``users`` has one, named None) and ``threads``, which owns the threads that
    :func:`~openclaw_trl.runtime.run` starts."""

    config: OpenClawConfig
    model_name: str  # the recipe's model_name_or_path
    model_path: str  # what is loaded: a Hub id or a local directory (the tiny and toy models are built)
    tokenizer: object
    engine: Engine | None = None
    users: tuple[UserRuntime, ...] = ()
    threads: RunThreads = field(default_factory=RunThreads)

    @property
    def user(self) -> UserRuntime:
        """The run's only user (a recipe without ``users``, or with one); ``ValueError`` with several."""
        if len(self.users) != 1:
            names = ", ".join(str(u.name) for u in self.users) or "none"
            raise ValueError(f"this run has {len(self.users)} users ({names}): pick one from runtime.users")
        return self.users[0]

    @property
    def server(self) -> ServerThread | None:
        return self.threads.server

    @property
    def stop_event(self) -> threading.Event:
        return self.threads.stop_event

    def close(self) -> None:
        """Stop the run's threads, the scorers, the Best-of-N pickers and the engine (the stores stay open)."""
        self.threads.close()
        for component in (c for u in self.users for c in (u.scorer, u.best_of_n)):
            if component is not None:
                component.close()
        if self.engine is not None:
            self.engine.close()


@dataclass(frozen=True)
class LearningParts:
    """What turns one store's conversations into samples and shows their learning: the collector, the
    scorer, the Best-of-N picker (None unless ``best_of_n > 1``), the learning control and the status."""

    collector: TurnCollector
    scorer: Scorer
    best_of_n: BestOfN | None
    learning: LearningControl
    status: LearningStatus


def learning_parts(
    config: OpenClawConfig, engine, store, tokenizer, progress: TrainingProgress, judge_fn=None
) -> LearningParts:
    """The ``LearningParts`` of one user (``config``: the one they are built from, ``users.user_args``;
    ``engine``: theirs; ``store``: their own)."""
    from openclaw_trl.judging import Scorer
    from openclaw_trl.serving_stack import make_best_of_n
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.trainer.control import LearningControl

    collector = TurnCollector(store, config.session_config(), tokenizer=tokenizer)
    scorer = Scorer(store, config.judge_config(), engine=engine, tokenizer=tokenizer, judge_fn=judge_fn)
    best_of_n = make_best_of_n(config.best_of_n, config.quick_judge_config(), engine, tokenizer, store)
    learning = LearningControl(store, config.output_dir, config.adapter_history, engine)
    status = LearningStatus(config, engine, store, progress, learning)
    return LearningParts(collector, scorer, best_of_n, learning, status)


def prepare_start(config: OpenClawConfig):
    """``(store, StartPoint)`` of one user (``config``: the one they are built from): move their old run aside
    (``fresh_start``), open their store, bring it to the checkpoint they continue from, and log where they
    start (the run's first log line)."""
    from openclaw_trl.resume import move_previous_run, start_point
    from openclaw_trl.store import Store

    moved_to = move_previous_run(config) if config.fresh_start else None
    Path(config.store_path).parent.mkdir(parents=True, exist_ok=True)
    store = Store(config.store_path)
    start = start_point(config, store, moved_to)
    logger.info("%s", start.describe())
    return store, start


@contextmanager
def sigterm_as_interrupt():
    """Ctrl-C and ``kill`` (SIGTERM) stop training: ``KeyboardInterrupt`` in the block, raised again if it was
    swallowed, then the last update is checkpointed and nothing is lost (:func:`openclaw_trl.stopping.graceful`)."""
    from openclaw_trl.stopping import graceful

    with graceful():
        yield


def share_publicly(runtime: Runtime) -> str:
    """A public Gradio link to the running server. It exposes an API that trains the model, so :func:`run`
    refuses it unless the API requires a key (``api_key_env``)."""
    from openclaw_trl.serving.app import open_share_link

    url = open_share_link(runtime.config.host, runtime.server.port)
    logger.info("public link: %s", url)
    return url
