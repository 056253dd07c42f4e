"""The serve-only stack (``openclaw-trl serve``, the serving benchmark): engine + store + collector + the
FastAPI app with the Gradio UI, wired in one call, and the Best-of-N picker both stacks share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
    from openclaw_trl.judging import BestOfN, make_quick_judge

    if n <= 1:
        return None
    quick_judge = make_quick_judge(quick_judge_config, engine=engine, tokenizer=tokenizer, store=store)
    return BestOfN(
        n,
        quick_judge,
        store,
        explore=quick_judge_config.explore,
        entropy_coef=quick_judge_config.entropy_coef,
    )
