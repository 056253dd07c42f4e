"""``ServerSettings``: how the server listens, what it serves and which limits it enforces."""

from __future__ import annotations

from dataclasses import dataclass, field

from openclaw_trl.serving.limits import RequestLimits


@dataclass
class ServerSettings:
    """How the server listens, what it serves and which limits it enforces.

    Parameters:
        host / port: where uvicorn listens. 127.0.0.1 by default: the API can train the model, so it
            is not exposed unless asked.
        model_names: names ``GET /v1/models`` lists and ``model`` may take; the first is the default
            when a request omits ``model``. Any other name is a 404 ``model_not_found``.
        api_key_env: name of an environment variable holding a bearer token. ``None`` = no auth. When it
            is set but the variable is empty, ``create_app`` refuses to start (fail closed).
        max_context_len: prompt + completion tokens of one request. ``None``: the model's own context
            (the engine's ``max_model_len``, else the ``max_position_embeddings`` of the model's config; 4,096
            when neither is known); a set value is lowered to the model's when that is smaller.
        min_reply_tokens: the least room a prompt must leave for the reply (256). A prompt that leaves less
            than ``min(min_reply_tokens, the request's max_tokens, half the context)`` is a 400
            ``context_length_exceeded``
            (agents such as OpenClaw then compact their history); otherwise ``max_tokens`` is clamped to the
            room left (agents routinely ask for more than is left).
        default_temperature / default_top_p / default_max_tokens: sampling values of requests that
            omit them (the temperature is recorded with every turn).
        train_temperature: the sampling temperature of turns that can be trained on (main turns of
            trainable, non-private sessions), whatever the request asks: the trainer's temperature, so
            the sampling log-probs, the teacher's and the trainer's are all at one temperature (and a
            trainable turn is never greedy). A trainable turn is also sampled from the full distribution: the
            request's ``top_p`` / ``top_k`` would truncate it, and the stored log-probs, the importance
            weight and the PPO ratio are those of the untruncated policy. The request's temperature,
            ``top_p`` and ``top_k`` apply to the other turns.
            Replies say which temperature was used (``openclaw.temperature``).
        max_tokens_cap: upper bound on ``max_tokens`` whatever the client asks.
        limits: what one request may carry (``openclaw_trl.serving.protocols.chat_completions.schema.RequestLimits``: body size,
            messages, text, tools, stop strings, session id, feedback text, prompt tokens).
        learn_unstored_responses: learn from Responses requests sent with ``store: false`` (such a response is
            never kept for retrieval by id); off, their conversation is flagged private (stored, never learned from).
        generation_threads: threads running blocking engine calls (concurrent requests batch there).
        ui: mount the Gradio UI at ``/``.
        model_id: what serves, as the recipe names it (``model_name_or_path``) or the model directory: the UI's
            header shows it, and the offline toy model (``openclaw-trl/toy``) gets its guide (what it knows,
            what to type). ``None``: the engine's model path.
    """

    host: str = "127.0.0.1"
    port: int = 7860
    model_names: list[str] = field(default_factory=lambda: ["openclaw"])
    api_key_env: str | None = None
    max_context_len: int | None = None
    min_reply_tokens: int = 256
    default_temperature: float = 0.7
    train_temperature: float = 1.0
    default_top_p: float = 1.0
    default_max_tokens: int = 512
    max_tokens_cap: int = 4096
    limits: RequestLimits = field(default_factory=RequestLimits)
    learn_unstored_responses: bool = True
    generation_threads: int = 32
    ui: bool = True
    model_id: str | None = None

    def __post_init__(self) -> None:
        if not self.model_names:
            raise ValueError("ServerSettings.model_names must name at least one model")
        if self.max_context_len is not None and self.max_context_len < 2:
            raise ValueError("ServerSettings.max_context_len must be >= 2 (or None: the model's own)")
        if self.min_reply_tokens < 1:
            raise ValueError("ServerSettings.min_reply_tokens must be >= 1")
        if not 0 < self.default_max_tokens <= self.max_tokens_cap:
            raise ValueError("ServerSettings needs 0 < default_max_tokens <= max_tokens_cap")
        if not self.train_temperature > 0:
            raise ValueError(
                "ServerSettings.train_temperature must be > 0 (trainable turns are never greedy)"
            )
