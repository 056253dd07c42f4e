"""The OpenAI-compatible routes: every served turn becomes training data.

``router`` (mounted by ``openclaw_trl.serving.app.create_app``) answers

* ``POST /v1/chat/completions``: OpenAI wire format, real token streaming over SSE (reasoning and
  tool-call deltas carry their ``index``, as OpenAI clients require); the reasoning part of a message or
  delta is sent as both ``reasoning_content`` and ``reasoning``, and either is accepted on input;
* ``POST /v1/responses`` (OpenAI Responses API, ``openclaw_trl.serving.responses``) on the same chat service,
  ``GET /v1/responses/{id}`` (the stored response object);
* ``POST /v1/feedback``: a signal on any turn of the session it names (``session_id`` / ``X-Session-Id``: the
  reply's ``openclaw.session_id``; another session's turn is a 404): ``action`` ``rate`` (👍/👎 + optional
  text, the default), ``correct`` (what the answer should have been), ``reject`` (retry: a 👎 without text) or
  ``withdraw`` (undo: never judged or trained), as in the UI (``openclaw_trl.sessions.signals``). A bare 👎
  (``rating: -1`` without ``text``) waits for its correction: the reply's ``correction_until`` (ISO 8601, UTC)
  and ``correction_seconds_left`` say until when an ``action: "correct"`` on that turn replaces it (null for
  any other signal, or with ``correction_window_s: 0``); ``GET /v1/status`` counts the ratings waiting
  (``correction_window``);
* ``GET /v1/models``, ``GET /healthz``, ``GET /v1/status``; any other ``/v1/...`` is a 404 ``unknown_url``.

One module per route group, each with its own ``router``: ``api_chat`` (chat completions), ``api_responses``
(the Responses API), ``api_feedback`` (per-turn signals), ``api_status`` (health, models, status); ``api_base``
holds what they share. Every route but ``/healthz`` depends on ``api_base.require_api_key``, which checks the
bearer key and puts the caller's ``Tenant`` (their chat service, collector and learning control) on
``request.state``; a handler reads only that tenant (``api_base.tenant_of``), so one user's request never
reaches another user's parts.

Why the server renders the chat template itself: the engine gets token ids and returns the sampled
ids + log-probs, and those exact ids are stored. The turn is written to the store
*before* the response is returned (for a stream: before the final chunk), so a client that reacts
fast to a reply can never race the bookkeeping of the turn its next message is the next state of.

Serving never answers 503 because training runs: the engine serves from a published
adapter copy. Generation is blocking torch work, so it runs in a thread pool and concurrent requests
reach the engine together (which batches them).

Wire-format details a client may care about:

* Session fields: ``X-Session-Id`` / ``session_id`` / ``user``, ``X-Turn-Type`` (``main``/``side``),
  ``X-Session-Done`` / ``session_done``, ``X-Session-Private`` / ``session_private`` (``openclaw_trl.sessions``).
* Every reply says which turn it is: ``x-openclaw-turn-id`` / ``x-openclaw-policy-version`` headers (not on
  streams: their headers leave before the turn exists), ``system_fingerprint = "openclaw-v{version}"``, and an
  ``openclaw`` object (``turn_id``, ``session_id``, ``turn_type``, ``next_state_of``, ``policy_version``,
  ``temperature``; ``best_of_n`` on a Best-of-N turn: ``n``, ``served_index``, ``scores``, ``group_id``) in the
  response, or in the stream's final chunk. ``POST /v1/feedback`` takes that ``turn_id``.
* ``max_tokens`` is clamped to the room the context leaves and to ``max_tokens_cap``; ``stop`` text is not
  returned; ``logprobs``/``top_logprobs`` (<= 20) are the sampling log-probs and the policy's top-K; in a stream
  they arrive in one chunk just before the final one (the engine streams token ids only).
* Accepted and ignored: ``presence_penalty``, ``frequency_penalty``, ``response_format``, ``tool_choice``
  ``auto`` / ``required`` / a function of the request's tools (``"none"`` renders without tools), unknown fields.
  Refused: ``n > 1``, non-text content parts, a ``tool_choice`` naming an unknown function, and in any body a
  string (or field name) with a lone UTF-16 surrogate (``text_check.check_text``).
"""

from __future__ import annotations

from fastapi import APIRouter

from openclaw_trl.serving import api_chat, api_feedback, api_responses, api_status
from openclaw_trl.serving.errors import ApiError

router = APIRouter()
for _group in (api_status, api_chat, api_responses, api_feedback):
    router.include_router(_group.router)


@router.api_route("/v1/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
async def unknown_route(rest: str):
    """Last: any other ``/v1/...`` path is a 404 ``unknown_url``."""
    raise ApiError(404, f"Unknown API route /v1/{rest}", "unknown_url")
