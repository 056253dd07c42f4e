"""Serving: the OpenAI-compatible HTTP API and the Gradio UI, both on one ``ChatService``.

* ``openai_schema``: the wire format (request models, message normalisation), its errors and ``RequestLimits``.
* ``settings``: ``ServerSettings``, how the server listens, what it serves and which limits it enforces.
* ``streaming``: token ids -> OpenAI stream deltas (``StreamDecoder``) and the ``stop`` trimming.
* ``chat_service``: one turn end to end (validate, render, generate, parse, record), shared by API and UI.
* ``api``: the routes (chat completions with SSE streaming, feedback, models, healthz, status).
* ``ui_chat``: the chat column's state and display without Gradio (turn of each message, version line).
* ``ui``: the Gradio chat app (layout, event handlers, the learning panel).
* ``app``: ``create_app`` (routes + UI + auth on one service), ``ServerThread``, ``serve``, ``open_share_link``.

Imports go one way: ``app`` → ``api``, ``ui`` → ``ui_chat`` → ``chat_service`` → ``streaming``, ``settings`` →
``openai_schema`` (a contract in ``pyproject.toml`` keeps it so). Importing this package imports none of them.
"""
