"""Wiring: one process holds the engine, the store, the collector, the scorer, the server and the trainer.

``load_recipe(argv)`` parses a recipe YAML (plus command-line overrides) with TRL's ``TrlParser``;
``build_runtime`` creates the components from the settings ``OpenClawConfig`` builds; ``run`` starts
what the ``source`` needs (:mod:`openclaw_trl.sources`) and trains:

* ``live``: the UI + API listen on ``host:port``; people chat; the trainer waits for judged samples.
* ``simulated``: the same server, bound to a free local port, and a simulated user
  (``simulated_user``) that talks to it over HTTP in a background thread.
* ``replay``: recorded conversations (``replay_path``, JSONL) go through the same collector and scorer
  (all judged before training starts, so a replay run is reproducible).

Only the main process owns the store, serves and scores; under ``accelerate launch`` / ``torchrun`` with
several processes each rank trains on its slice of the batch the main process takes
(see ``OpenClawTrainer._take_batch``).

A run continues from the latest checkpoint of its ``output_dir`` (``openclaw_trl.resume``): the resumed
adapter is published to the engine before anything is served, so the first turns already carry its
policy version. Ctrl-C and SIGTERM end training with a checkpoint of the last update.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.console import learning_line, serving_line, uvicorn_log_level
from openclaw_trl.errors import UserError
from openclaw_trl.sources import replay_and_judge, start_simulation
from openclaw_trl.status import learning_status
from openclaw_trl.toy import TOY_MODEL_ID
from openclaw_trl.trainer import last_step_metrics

logger = logging.getLogger(__name__)

TINY_MODEL_ID = "openclaw-trl/tiny"
"""``model_name_or_path`` value that builds the tiny offline test model (random weights) on first use."""
TINY_AGENT_MODEL_ID = "openclaw-trl/tiny-agent"
"""The tiny model with Qwen's real vocabulary and a 65,536-token context, for agent-sized prompts
(``recipes/tiny_openclaw.yaml``)."""
_TINY_MODELS = {TINY_MODEL_ID: "tiny-model", TINY_AGENT_MODEL_ID: "tiny-agent-model"}


def load_recipe(argv: list[str] | None = None):
    """``(config, model_args, recipe_yaml)`` from ``--config recipe.yaml`` and CLI overrides (TrlParser)."""
    from trl import ModelConfig, TrlParser

    parser = TrlParser((OpenClawConfig, ModelConfig))
    try:
        config, model_args = parser.parse_args_and_config(argv)
    except ValueError as err:  # OpenClawConfig.__post_init__ says what is wrong and how to fix it
        raise UserError(f"invalid recipe: {err}") from err
    recipe_yaml = None
    if argv and "--config" in argv:
        recipe_yaml = Path(argv[argv.index("--config") + 1]).read_text()
    return config, model_args, recipe_yaml


def resolve_model_path(model_args, config: OpenClawConfig) -> str:
    """The local model directory (building the tiny model when the recipe names ``TINY_MODEL_ID`` or
    ``TINY_AGENT_MODEL_ID``; the pre-trained toy model shipped with the package when it names
    ``TOY_MODEL_ID``)."""
    name = model_args.model_name_or_path
    if not name:
        raise UserError("the recipe must set model_name_or_path (a Hub model id or a local directory)")
    if name in _TINY_MODELS:
        path = Path(config.output_dir) / _TINY_MODELS[name]
        if not (path / "config.json").exists():
            from openclaw_trl import testing

            try:
                (testing.build_tiny_model if name == TINY_MODEL_ID else testing.build_tiny_agent_model)(path)
            except ImportError as exc:
                raise UserError(str(exc)) from exc
        return str(path)
    if name == TOY_MODEL_ID:
        from openclaw_trl.toy.pretrain import toy_model

        return str(toy_model(log=logger.info))
    return name


def lora_config(model_args):
    """PEFT LoraConfig from TRL's ModelConfig; all linear projections unless the recipe names modules."""
    from trl import get_peft_config

    if not model_args.use_peft:
        return None
    if model_args.lora_target_modules is None:
        model_args.lora_target_modules = "all-linear"
    return get_peft_config(model_args)


@dataclass
class Serving:
    """The serve-only stack: engine + store + collector + FastAPI app (the Gradio UI mounted at ``/``)."""

    engine: object
    store: object
    collector: object
    app: object
    settings: object

    def close(self) -> None:
        self.engine.close()
        self.store.close()


def build_serving(
    model_path: str | Path,
    store_path: str | Path,
    settings=None,
    session_config=None,
    engine=None,
    status=None,
    engine_kwargs: dict | None = None,
    best_of_n: tuple[int, object] | None = None,
) -> Serving:
    """Engine (``HFEngine`` unless one is given) + ``Store`` + ``TurnCollector`` + ``create_app``.

    ``best_of_n``: ``(n, QuickJudgeConfig)`` to serve trainable turns as Best-of-N (``judging.BestOfN``).
    """
    from transformers import AutoTokenizer

    from openclaw_trl.serving.app import create_app
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import SessionConfig, TurnCollector
    from openclaw_trl.store import Store

    settings = settings or ServerSettings()
    if engine is None:
        from openclaw_trl.engines.hf import HFEngine

        engine = HFEngine(model_path, **(engine_kwargs or {}))
    Path(store_path).parent.mkdir(parents=True, exist_ok=True)
    store = Store(store_path)
    session_config = session_config or SessionConfig()
    tokenizer = getattr(engine, "tokenizer", None) or AutoTokenizer.from_pretrained(model_path)
    collector = TurnCollector(store, session_config, tokenizer=tokenizer)
    picker = make_best_of_n(best_of_n[0], best_of_n[1], engine, tokenizer, store) if best_of_n else None
    app = create_app(engine, collector, store, settings, status=status, best_of_n=picker)
    return Serving(engine, store, collector, app, settings)


def make_best_of_n(n: int, quick_judge_config, engine, tokenizer, store):
    """The ``judging.BestOfN`` of ``n`` candidates per trainable turn (None when ``n == 1``)."""
    from openclaw_trl.judging import BestOfN, QuickJudge

    if n <= 1:
        return None
    quick_judge = QuickJudge(quick_judge_config, engine=engine, tokenizer=tokenizer)
    return BestOfN(n, quick_judge, store, explore=quick_judge_config.explore)


@dataclass
class Runtime:
    """The components of one run; the engine, collector and scorer (and the store) exist only in the main process."""

    config: OpenClawConfig
    model_path: str
    tokenizer: object
    store: object
    engine: object
    collector: object
    scorer: object
    best_of_n: object | None = None  # judging.BestOfN when best_of_n > 1
    trainer: object | None = None
    app: object | None = None
    learning: object | None = None  # the LearningControl (pause, rollback, history) of the main process
    server: object | None = None
    threads: list[threading.Thread] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    model_name: str | None = None  # the recipe's model_name_or_path (model_path may be a cache folder)

    def status(self) -> dict:
        """The live view of learning for ``/v1/status`` and the UI's learning panel."""
        return learning_status(self.config, self.engine, self.store, self.trainer, self.learning)

    def close(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=30)
        if self.server is not None:
            self.server.stop()
        if self.scorer is not None:
            self.scorer.close()
        if self.best_of_n is not None:
            self.best_of_n.close()
        if self.engine is not None:
            self.engine.close()


def build_runtime(
    config: OpenClawConfig, model_args, recipe_yaml: str | None = None, train: bool = True
) -> Runtime:
    """Create every component for ``config`` (the trainer only when ``train``).

    The main process owns the store, the engine, the collector and the scorer; every process loads the
    same checkpoint to continue from and builds its trainer.
    """
    from accelerate import PartialState

    from openclaw_trl.resume import checkpoint_to_resume

    state = PartialState()
    store = start = None
    if state.is_main_process:
        store, start = prepare_start(config)
        resolve_model_path(model_args, config)  # builds the tiny test model once, before the others read it
    state.wait_for_everyone()
    config.resume_from_checkpoint = checkpoint_to_resume(config)  # every process loads the same one
    model_path = resolve_model_path(model_args, config)
    peft_config = lora_config(model_args)
    tokenizer = _load_tokenizer(model_path)
    runtime = Runtime(config, model_path, tokenizer, store, None, None, None)
    runtime.model_name = model_args.model_name_or_path
    if state.is_main_process:
        logger.info("loading %s for serving (%s engine)", runtime.model_name, config.engine)
        _build_serving_side(runtime, start, peft_config, model_args.dtype)
    if train:
        if state.is_main_process:
            logger.info("preparing the trainer (method %s)", config.method)
        runtime.trainer = _build_trainer(runtime, model_args, peft_config, recipe_yaml)
    return runtime


def _load_tokenizer(model_path: str):
    """The model's tokenizer; a model that cannot be loaded is a :class:`UserError` that says what to try."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path)
    except OSError as err:
        raise UserError(
            f"could not load the model {model_path!r} ({str(err).splitlines()[0]}). It is downloaded from the "
            "Hugging Face Hub on first use: check the connection, or point model_name_or_path at a local "
            f"copy. Offline, try the toy demo: make run RECIPE=recipes/toy_offline.yaml"
        ) from err


def _build_serving_side(runtime: Runtime, start, peft_config, dtype: str | None) -> None:
    """The engine (serving the resumed adapter from the first request on), the collector and the scorer."""
    from openclaw_trl.engines import create_engine
    from openclaw_trl.judging import Scorer
    from openclaw_trl.sessions import TurnCollector
    from openclaw_trl.trainer.control import LearningControl

    config, store, tokenizer = runtime.config, runtime.store, runtime.tokenizer
    kwargs = config.engine_kwargs(lora_config=peft_config, dtype=dtype)
    runtime.engine = create_engine(config.engine, runtime.model_path, **kwargs)
    if start.checkpoint:
        runtime.engine.publish_adapter(start.checkpoint, version=start.step)
    runtime.collector = TurnCollector(store, config.session_config(), tokenizer=tokenizer)
    runtime.scorer = Scorer(store, config.judge_config(), engine=runtime.engine, tokenizer=tokenizer)
    runtime.best_of_n = make_best_of_n(
        config.best_of_n, config.quick_judge_config(), runtime.engine, tokenizer, store
    )
    runtime.learning = LearningControl(store, config.output_dir, config.adapter_history, runtime.engine)


def _build_trainer(runtime: Runtime, model_args, peft_config, recipe_yaml: str | None):
    """``OpenClawTrainer`` on the recipe's model, loaded in its dtype and quantization."""
    from openclaw_trl.trainer import OpenClawTrainer

    config = runtime.config
    if model_args.dtype not in (None, "auto"):
        config.model_init_kwargs = {**(config.model_init_kwargs or {}), "dtype": model_args.dtype}
    if model_args.load_in_4bit or model_args.load_in_8bit:
        from trl import get_quantization_config

        config.model_init_kwargs = {
            **(config.model_init_kwargs or {}),
            "quantization_config": get_quantization_config(model_args),
        }
    return OpenClawTrainer(
        model=runtime.model_path,
        args=config,
        store=runtime.store,
        engine=runtime.engine,
        processing_class=runtime.tokenizer,
        peft_config=peft_config,
        recipe_yaml=recipe_yaml,
        learning=runtime.learning,
    )


def prepare_start(config: OpenClawConfig):
    """``(store, StartPoint)``: move an old run aside (``fresh_start``), open the store, bring it to the
    checkpoint the run continues from, and log where the run starts (its first log line)."""
    from openclaw_trl.resume import move_previous_run, start_point
    from openclaw_trl.store import Store

    moved_to = move_previous_run(config) if config.fresh_start else None
    Path(config.store_path).parent.mkdir(parents=True, exist_ok=True)
    store = Store(config.store_path)
    start = start_point(config, store, moved_to)
    logger.info("%s", start.describe())
    return store, start


def start_server(runtime: Runtime, port: int | None = None, ui: bool = True):
    """The FastAPI app (+ Gradio UI) in a background uvicorn thread; returns the ServerThread."""
    from openclaw_trl.serving.app import ServerThread, create_app

    settings = runtime.config.server_settings(port=port, ui=ui)
    settings.model_id = runtime.model_name  # the UI's header names it
    logger.info("starting the server (%s)", "UI and API" if ui else "API")
    runtime.app = create_app(
        runtime.engine,
        runtime.collector,
        runtime.store,
        settings,
        status=runtime.status,
        best_of_n=runtime.best_of_n,
        learning=runtime.learning,
    )
    log_level = uvicorn_log_level(runtime.config.log_level)
    server = ServerThread(runtime.app, host=settings.host, port=settings.port, log_level=log_level)
    runtime.server = server.start()
    model = runtime.model_name or runtime.model_path
    logger.info("%s", serving_line(model, server.url, ui, settings.model_names[0]))
    if runtime.trainer is not None:
        from openclaw_trl.trainer.reporting import METRICS_FILE

        logger.info("%s", learning_line(runtime.config, Path(runtime.config.output_dir) / METRICS_FILE))
        if runtime.learning is not None and runtime.learning.paused:
            logger.info(
                "learning is paused (kept from the last run): resume it in the UI or POST /v1/learning"
            )
    return runtime.server


def share_publicly(runtime: Runtime) -> str:
    """A public Gradio link to the running server. It exposes an API that trains the model, so :func:`run`
    refuses it unless the API requires a key (``api_key_env``)."""
    from openclaw_trl.serving.app import open_share_link

    url = open_share_link(runtime.config.host, runtime.server.port)
    logger.info("public link: %s", url)
    return url


def run(runtime: Runtime, share: bool = False) -> dict:
    """Start the source, the scorer and train until ``max_steps`` (or Ctrl-C); returns the last metrics.

    ``share`` (live source only) also opens a public Gradio link to the UI and API.
    """
    config, trainer = runtime.config, runtime.trainer
    if share and (config.source != "live" or not config.api_key_env):
        raise UserError(
            "--share needs source: live and api_key_env (a public endpoint must not be anonymous)"
        )
    if runtime.scorer is not None:
        if config.source == "replay":
            replay_and_judge(runtime)
        runtime.scorer.start()
        if config.source == "live":
            start_server(runtime)
            if share:
                share_publicly(runtime)
        elif config.source == "simulated":
            start_simulation(runtime, start_server(runtime, port=0, ui=False).url)
    try:
        with _sigterm_as_interrupt():
            trainer.resume_from(config.resume_from_checkpoint)
    except KeyboardInterrupt:
        logger.info("stopping after update %d: saving a checkpoint", trainer.state.global_step)
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


@contextmanager
def _sigterm_as_interrupt():
    """``kill`` (SIGTERM) stops training as Ctrl-C does: the last update is checkpointed, nothing is lost."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
