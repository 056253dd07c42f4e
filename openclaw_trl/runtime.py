"""Wiring: one process holds the engine, the store, the collector, the scorer, the server and the trainer.

``load_recipe(argv)`` parses a recipe YAML (plus command-line overrides) with TRL's ``TrlParser``;
``build_runtime`` creates the components; ``run`` starts what the ``source`` needs and trains:

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

import json
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.toy import TOY_MODEL_ID
from openclaw_trl.trainer import last_step_metrics

logger = logging.getLogger(__name__)

TINY_MODEL_ID = "openclaw-trl/tiny"
"""``model_name_or_path`` value that builds the tiny offline test model (random weights) on first use."""


def load_recipe(argv: list[str] | None = None):
    """``(config, model_args, recipe_yaml)`` from ``--config recipe.yaml`` and CLI overrides (TrlParser)."""
    from trl import ModelConfig, TrlParser

    parser = TrlParser((OpenClawConfig, ModelConfig))
    config, model_args = parser.parse_args_and_config(argv)
    recipe_yaml = None
    if argv and "--config" in argv:
        recipe_yaml = Path(argv[argv.index("--config") + 1]).read_text()
    return config, model_args, recipe_yaml


def resolve_model_path(model_args, config: OpenClawConfig) -> str:
    """The local model directory (building the tiny model when the recipe names ``TINY_MODEL_ID``, the
    pre-trained toy model, cached in the user cache directory, when it names ``TOY_MODEL_ID``)."""
    name = model_args.model_name_or_path
    if not name:
        raise ValueError("the recipe must set model_name_or_path")
    if name == TINY_MODEL_ID:
        path = Path(config.output_dir) / "tiny-model"
        if not (path / "config.json").exists():
            from openclaw_trl.testing import build_tiny_model

            build_tiny_model(path)
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
class Runtime:
    config: OpenClawConfig
    model_path: str
    tokenizer: object
    store: object
    engine: object
    collector: object
    scorer: object
    trainer: object | None = None
    app: object | None = None
    server: object | None = None
    threads: list[threading.Thread] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)

    def status(self) -> dict:
        """The live view of learning for ``/v1/status`` and the UI's learning panel."""
        trainer = self.trainer
        history = []
        last = {}
        if trainer is not None:
            for entry in trainer.state.log_history:
                if "reward" in entry:
                    history.append(
                        {
                            "step": entry.get("step"),
                            "reward_mean": entry.get("reward"),
                            "hint_accept_rate": entry.get("opd/hint_accept_rate"),
                            "opd_mean_advantage": entry.get("opd/mean_advantage"),
                            "loss": entry.get("loss"),
                        }
                    )
                    last = entry
        return {
            "policy_version": getattr(self.engine, "policy_version", 0),
            "samples_waiting": self.store.count_waiting(),
            "batch_size": self.config.batch_size,
            "method": self.config.method,
            "last_metrics": last,
            "history": history,
            "last_hints": self.store.recent_hints(5),
            "turns_failed": self.store.counts()["turns_failed"],
            "teacher_failed": self.store.count_teacher_failed(),
        }

    def close(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=30)
        if self.server is not None:
            self.server.stop()
        if self.scorer is not None:
            self.scorer.close()
        if self.engine is not None:
            self.engine.close()


def build_runtime(
    config: OpenClawConfig, model_args, recipe_yaml: str | None = None, train: bool = True
) -> Runtime:
    """Create every component for ``config`` (the trainer only when ``train``)."""
    import torch
    from accelerate import PartialState
    from transformers import AutoTokenizer

    from openclaw_trl.engines import create_engine
    from openclaw_trl.resume import checkpoint_to_resume
    from openclaw_trl.scorer import JudgeConfig, Scorer
    from openclaw_trl.sessions import SessionConfig, TurnCollector

    state = PartialState()
    main = state.is_main_process
    store = start = None
    if main:
        store, start = prepare_start(config)
        resolve_model_path(model_args, config)  # builds the tiny test model once, before the others read it
    state.wait_for_everyone()
    config.resume_from_checkpoint = checkpoint_to_resume(config)  # every process loads the same one
    model_path = resolve_model_path(model_args, config)
    peft_config = lora_config(model_args)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    except OSError as err:
        raise OSError(
            f"could not load the model {model_path!r} ({str(err).splitlines()[0]}). It is downloaded from the "
            "Hugging Face Hub on first use: check the connection, or point model_name_or_path at a local "
            f"copy. Offline, try the toy demo: make run RECIPE=recipes/toy_offline.yaml"
        ) from err
    engine = collector = scorer = None
    if main:
        dtype = model_args.dtype if model_args.dtype not in (None, "auto") else None
        kwargs = {"max_batch_size": config.engine_max_batch_size}
        if config.engine == "hf":
            kwargs.update(lora_config=peft_config, dtype=getattr(torch, dtype) if dtype else None)
        else:
            kwargs.update(
                lora_config=peft_config,
                gpu_memory_utilization=config.vllm_gpu_memory_utilization,
                enable_sleep_mode=config.vllm_enable_sleep_mode,
                max_model_len=config.vllm_max_model_length,
                max_logprobs=max(20, config.kd_topk),
            )
        engine = create_engine(config.engine, model_path, **_supported(config.engine, kwargs))
        if start.checkpoint:  # the resumed adapter is served from the first request on
            engine.publish_adapter(start.checkpoint, version=start.step)
        collector = TurnCollector(
            store,
            SessionConfig(
                session_idle_timeout=config.session_idle_timeout, train_anonymous=config.train_anonymous
            ),
            tokenizer=tokenizer,
        )
        scorer = Scorer(store, JudgeConfig(**config.judge_settings()), engine=engine, tokenizer=tokenizer)
    runtime = Runtime(config, model_path, tokenizer, store, engine, collector, scorer)
    if train:
        from openclaw_trl.trainer import OpenClawTrainer

        if model_args.dtype not in (None, "auto"):
            config.model_init_kwargs = {**(config.model_init_kwargs or {}), "dtype": model_args.dtype}
        if model_args.load_in_4bit or model_args.load_in_8bit:
            from trl import get_quantization_config

            config.model_init_kwargs = {
                **(config.model_init_kwargs or {}),
                "quantization_config": get_quantization_config(model_args),
            }
        runtime.trainer = OpenClawTrainer(
            model=model_path,
            args=config,
            store=store,
            engine=engine,
            processing_class=tokenizer,
            peft_config=peft_config,
            recipe_yaml=recipe_yaml,
        )
    return runtime


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


def _supported(kind: str, kwargs: dict) -> dict:
    """Keep the keyword arguments the engine's constructor accepts (the two engines differ a little)."""
    import inspect

    if kind == "hf":
        from openclaw_trl.engines.hf import HFEngine as cls
    else:
        from openclaw_trl.engines.vllm import VLLMEngine as cls
    params = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in kwargs.items() if k in params and v is not None}


def server_settings(config: OpenClawConfig, port: int | None = None, ui: bool = True):
    from openclaw_trl.server import ServerSettings

    return ServerSettings(
        host=config.host,
        port=config.port if port is None else port,
        model_names=[config.served_model_name],
        api_key_env=config.api_key_env,
        default_temperature=config.temperature,
        train_temperature=config.temperature,
        default_max_tokens=min(512, config.max_completion_length or 512),
        max_tokens_cap=max(config.max_completion_length or 512, 1),
        session_idle_timeout_s=config.session_idle_timeout,
        limits=config.request_limits(),
        ui=ui,
    )


def start_server(runtime: Runtime, port: int | None = None, ui: bool = True):
    """The FastAPI app (+ Gradio UI) in a background uvicorn thread; returns the ServerThread."""
    from openclaw_trl.server import ServerThread, create_app

    settings = server_settings(runtime.config, port=port, ui=ui)
    runtime.app = create_app(
        runtime.engine, runtime.collector, runtime.store, settings, status=runtime.status
    )
    runtime.server = ServerThread(runtime.app, host=settings.host, port=settings.port).start()
    logger.info("serving on %s", runtime.server.url)
    return runtime.server


def start_simulation(runtime: Runtime) -> threading.Thread:
    """Simulated conversations against our own server until training stops (or ``simulated_sessions``)."""
    import importlib

    from openclaw_trl.simulation import run_conversations

    module, _, name = runtime.config.simulated_user.partition(":")
    user = getattr(importlib.import_module(module), name)()
    server = runtime.server or start_server(runtime, port=0, ui=False)
    limit = runtime.config.simulated_sessions

    def loop():
        done, round_ = 0, 0
        while not runtime.stop_event.is_set() and (limit == 0 or done < limit):
            n = 4 if limit == 0 else min(4, limit - done)
            logs = run_conversations(
                server.url,
                user,
                n,
                seed=runtime.config.seed + round_,
                model=runtime.config.served_model_name,
                max_tokens=min(64, runtime.config.max_completion_length or 64),
                should_stop=runtime.stop_event.is_set,
            )
            done += len(logs)
            round_ += 1

    thread = threading.Thread(
        target=_guard(loop, "simulation", runtime), name="openclaw-simulation", daemon=True
    )
    thread.start()
    runtime.threads.append(thread)
    return thread


def replay_conversations(runtime: Runtime, path: str | Path) -> int:
    """Feed recorded conversations through the collector (and so the scorer); returns turns recorded.

    Each JSONL row is ``{"session_id": str, "messages": [...]}``. Every assistant message is a turn: its
    prompt is the messages before it, rendered with the chat template; its completion ids are the template
    text of the message after that prompt (text data has no sampled ids), and its "sampling" log-probs are
    scored by the current policy, so the trainer treats it as on-policy data of that version. A message
    whose rendering does not extend the prompt rendering is skipped (notes §7.5).
    """
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.engines.base import Completion

    tok, engine, collector = runtime.tokenizer, runtime.engine, runtime.collector
    temperature = runtime.config.temperature
    recorded = 0
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        messages, key = row["messages"], str(row.get("session_id") or f"replay-{line_no}")
        for i, message in enumerate(messages):
            if message.get("role") != "assistant" or i == 0:
                continue
            prompt_msgs = messages[:i]
            ctx = collector.begin(prompt_msgs, tools=row.get("tools"), session_key=key, turn_type="main")
            prompt_ids = render_prompt_ids(tok, prompt_msgs, row.get("tools"))
            full = tok.apply_chat_template(prompt_msgs + [message], tools=row.get("tools"), tokenize=False)
            prompt_text = tok.apply_chat_template(
                prompt_msgs, tools=row.get("tools"), tokenize=False, add_generation_prompt=True
            )
            if not full.startswith(prompt_text):
                logger.warning("replay %s: assistant message %d does not extend its prompt; skipped", key, i)
                collector.abort(ctx)
                continue
            completion_ids = tok(full[len(prompt_text) :].rstrip("\n"), add_special_tokens=False)["input_ids"]
            scores = engine.score([prompt_ids], [completion_ids], weights="policy", temperature=temperature)
            completion = Completion(completion_ids, scores.logprobs[0], "stop", engine.policy_version)
            collector.record_turn(ctx, prompt_ids, completion, temperature, response_message=dict(message))
            recorded += 1
        if messages and messages[-1].get("role") in ("user", "tool"):
            collector.abort(
                collector.begin(messages, tools=row.get("tools"), session_key=key, session_done=True)
            )
        else:
            collector.end_session(key)
    return recorded


def _replay_and_judge(runtime: Runtime) -> None:
    """Finite, recorded data: judge all of it before training, so a replay run is reproducible. A replay
    that fails (unreadable file, a bad row) raises :class:`SampleSourceError` with the cause."""
    from openclaw_trl.store import SampleSourceError

    path = runtime.config.replay_path
    try:
        n = replay_conversations(runtime, path)
    except Exception as exc:
        raise SampleSourceError(f"the replay source crashed: {type(exc).__name__}: {exc}") from exc
    judged = runtime.scorer.run_until_idle()
    logger.info("replayed %d turns from %s, judged %d", n, path, judged)


def _guard(fn, name: str, runtime: Runtime):
    """``fn`` for a source thread: if it crashes, the trainer's wait for samples raises its error (the run
    then ends with it) instead of waiting forever."""

    def run():
        try:
            fn()
        except Exception as exc:
            logger.exception("%s thread failed", name)
            runtime.store.fail_waiters(f"the {name} source crashed: {type(exc).__name__}: {exc}")

    return run


def share_publicly(runtime: Runtime) -> str:
    """A public Gradio link to the running server. It exposes an API that trains the model, so it is
    refused unless the API requires a key (``api_key_env``)."""
    if not runtime.config.api_key_env:
        raise ValueError("--share exposes the API publicly: set api_key_env to a variable holding a key")
    from openclaw_trl.commands.serve import open_share_link

    url = open_share_link(runtime.config.host, runtime.server.port)
    logger.info("public link: %s", url)
    return url


def run(runtime: Runtime, share: bool = False) -> dict:
    """Start the source, the scorer and train until ``max_steps`` (or Ctrl-C); returns the last metrics.

    ``share`` (live source only) also opens a public Gradio link to the UI and API.
    """
    config, trainer = runtime.config, runtime.trainer
    if share and (config.source != "live" or not config.api_key_env):
        raise ValueError(
            "--share needs source: live and api_key_env (a public endpoint must not be anonymous)"
        )
    if runtime.scorer is not None:
        if config.source == "replay":
            _replay_and_judge(runtime)
        runtime.scorer.start()
        if config.source == "live":
            start_server(runtime)
            if share:
                share_publicly(runtime)
        elif config.source == "simulated":
            start_simulation(runtime)
    try:
        with _sigterm_as_interrupt():
            trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    except KeyboardInterrupt:
        logger.warning("interrupted at update %d: saving a checkpoint", trainer.state.global_step)
    finally:
        runtime.stop_event.set()
        trainer.save_checkpoint()
        trainer.save_model(config.output_dir)
        if trainer.accelerator.is_main_process:  # the store's totals are the main process's
            trainer.write_run_info()
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
