"""Serving: the OpenAI-compatible HTTP API and the Gradio UI, both on one ``ChatService``.

* ``errors``: ``ApiError`` and the OpenAI error body; ``text_check``: request text is valid Unicode.
* ``openai_schema``: the chat request (models, message normalisation) and ``RequestLimits``;
  ``openai_response``: the typed reply models (``chat.completion``, chunks, the ``openclaw`` object).
* ``settings``: ``ServerSettings``, how the server listens, what it serves and which limits it enforces.
* ``streaming``: token ids -> OpenAI stream deltas (``StreamDecoder``), the ``stop`` trimming, ``TurnStream``.
* the turn pipeline, one step per module, each handing its result to the next: ``chat_prepare`` (validate,
  render, open the turn -> ``PreparedChat``), ``generation`` (the engine -> ``Generation``), ``recording``
  (parse, log-probs, store -> ``TurnResult``); ``chat_service``: ``ChatService`` runs them for API and UI.
* ``responses_schema`` / ``responses_models`` / ``responses_output`` / ``responses``: the Responses API.
* ``feedback_schema``: the per-turn signals' body, replies and errors (the signals go to the collector).
* ``api``: the routes, one module per group: ``api_chat``, ``api_responses``, ``api_feedback``,
  ``api_status`` (``api_base``: auth and bodies); ``versions_api``: adapter versions and the learning switch.
* ``ui`` and ``ui_*``: the Gradio chat app (layout, event handlers, the learning panel).
* ``app``: ``create_app`` (routes + UI + auth on one service), ``ServerThread``, ``serve``, ``open_share_link``.

Imports go one way, from ``app`` down to ``errors`` (a contract in ``pyproject.toml`` lists the layers).
Importing this package imports none of them.
"""
