"""The wire protocols the server speaks, one folder each: every served turn becomes training data.

* ``chat_completions``, ``responses``, ``feedback``, ``control``: the OpenAI-compatible protocols and the
  server's own routes, each a ``base.Protocol`` (its router, the paths it owns, how it renders errors);
* ``messages``: Anthropic's Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``), its errors
  in Anthropic's shape and its key in ``x-api-key`` (or the bearer key);
* ``base``: ``Protocol`` and the 404 of unknown ``/v1/...`` paths; ``openai_errors``: OpenAI's error shape.

Adding a protocol means a new folder and one registration line (``messages`` was added so):

1. ``protocols/<name>/``: its wire schema, a conversion of its body to the pipeline's ``TurnRequest``
   (``pipeline.turn``: internal chat messages, tools, sampling values, session fields), its reply models,
   its router (routes depend on ``http.auth.authorized(...)``, which may name extra key sources such as
   ``http.auth.header_key("x-api-key")``), and an error renderer (``ApiError`` -> response, e.g. Anthropic's
   ``{"type": "error", "error": {"type", "message"}}``); its ``__init__`` defines
   ``PROTOCOL = Protocol(name, router, paths, render_error)``;
2. its ``PROTOCOL`` added to ``serving.app.PROTOCOLS``. Errors raised on its ``paths`` are then rendered by
   its ``render_error``; every other path keeps its own protocol's shape.

The routes, as the protocols registered today answer them:

* ``POST /v1/chat/completions``: OpenAI wire format, real token streaming over SSE (reasoning and
  tool-call deltas carry their ``index``, as OpenAI clients require); the reasoning part of a message or
  delta is sent as both ``reasoning_content`` and ``reasoning``, and either is accepted on input;
* ``POST /v1/responses`` (OpenAI Responses API, ``openclaw_trl.serving.protocols.responses.turns``) on the same chat service,
  ``GET /v1/responses/{id}`` (the stored response object);
* ``POST /v1/messages`` (Anthropic Messages API, ``openclaw_trl.serving.protocols.messages``) on the same chat
  service, ``POST /v1/messages/count_tokens``;
* ``POST /v1/feedback``: a signal on any turn of the session it names (``session_id`` / ``X-Session-Id``: the
  reply's ``openclaw.session_id``; another session's turn is a 404; ``turn_id: "latest"`` is that session's
  last reply, for a client that never saw the turn id, such as a chat command): ``action`` ``rate`` (👍/👎 + optional
  text, the default), ``correct`` (what the answer should have been), ``reject`` (retry: a 👎 without text) or
  ``withdraw`` (undo: never judged or trained), as in the UI (``openclaw_trl.sessions.signals``). A bare 👎
  (``rating: -1`` without ``text``) waits for its correction: the reply's ``correction_until`` (ISO 8601, UTC)
  and ``correction_seconds_left`` say until when an ``action: "correct"`` on that turn replaces it (null for
  any other signal, or with ``correction_window_s: 0``); ``GET /v1/status`` counts the ratings waiting
  (``correction_window``);
* ``GET /v1/models``, ``GET /healthz``, ``GET /v1/status``; any other ``/v1/...`` is a 404 ``unknown_url``.

Every route but ``/healthz`` checks the caller's key (``http.auth``), which puts the caller's ``Tenant``
(their chat service, collector and learning control) on ``request.state``; a handler reads only that tenant,
so one user's request never reaches another user's parts.

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
