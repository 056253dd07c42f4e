"""``AdapterView``: one user's engine, a shared engine seen through that user's adapter name.

Several people share one base model and one engine; each has an adapter of their own. Every component that
serves, judges, scores or publishes for a user (the chat service, the collector, the scorer, the Best-of-N
picker, the learning control and the trainer) takes an ``Engine``; it gets the user's view, which names
the user's adapter on every call. ``policy`` then means that user's adapter and ``policy_version`` is its
version; ``base`` is the shared base weights (the judge's and, with ``teacher: base``, the teacher's), as for a
single user. A view never closes the shared engine: its owner does.
"""

from __future__ import annotations

from dataclasses import replace

from openclaw_trl.engines.base import check_adapter_name


class AdapterView:
    """The ``Engine`` contract for the adapter ``name`` of ``engine`` (which implements the ``adapter`` /
    ``name`` arguments of the contract). Attributes it does not define are the shared engine's."""

    def __init__(self, engine, name: str) -> None:
        check_adapter_name(name)
        if name is None:
            raise ValueError("an AdapterView needs a user's adapter name")
        self._engine = engine
        self.name = name

    @property
    def engine(self):
        """The shared engine."""
        return self._engine

    @property
    def tokenizer(self):
        return self._engine.tokenizer

    @property
    def policy_version(self) -> int:
        return self._engine.adapter_version(self.name)

    def adapter_version(self, name: str | None = None) -> int:
        return self._engine.adapter_version(self.name if name is None else name)

    def generate(self, requests, on_token=None, priority="serve", timeout_s=None):
        named = [replace(request, adapter=self.name) for request in requests]
        return self._engine.generate(named, on_token=on_token, priority=priority, timeout_s=timeout_s)

    def score(
        self,
        prompt_ids,
        completion_ids,
        weights="base",
        top_k=0,
        temperature=1.0,
        priority="learn",
        timeout_s=None,
        adapter=None,
    ):
        return self._engine.score(
            prompt_ids,
            completion_ids,
            weights=weights,
            top_k=top_k,
            temperature=temperature,
            priority=priority,
            timeout_s=timeout_s,
            adapter=self.name,
        )

    def publish_adapter(self, adapter, version: int, name: str | None = None) -> None:
        self._engine.publish_adapter(adapter, version, name=self.name)

    def close(self) -> None:
        """Nothing: the shared engine is closed by whoever built it."""

    def __getattr__(self, attribute):
        # only called for attributes not found on the view: model_path, max_model_len, lora_config, ...
        return getattr(self._engine, attribute)
