"""Serving: the wire protocols (OpenAI-compatible and Anthropic's Messages API) and the Gradio UI, all on one ``ChatService``.

* ``pipeline/``: one chat turn, protocol-free: ``turn.TurnRequest`` (what every protocol builds from its own
  wire body: internal chat messages, tools, sampling values, session fields) -> ``prepare`` (render, context
  room, open the turn -> ``PreparedChat``) -> ``generation`` (the engine -> ``Generation``) -> ``recording``
  (parse, log-probs, store -> ``TurnResult``), ``streaming`` (``TurnStream``, ``StreamDecoder``), all run by
  ``chat_service.ChatService`` for every protocol and the UI; ``results``: the ``openclaw`` object, log-probs.
* ``protocols/``: one folder per wire protocol (``chat_completions``, ``responses``, ``feedback``,
  ``control``): its schema, its conversion to ``TurnRequest``, its reply models, its routes and how it renders
  errors (a ``protocols.base.Protocol``). Adding a protocol = a new folder + one entry in ``app.PROTOCOLS``
  (``serving.protocols`` says what the folder holds).
* ``http/``: what every route shares: the key check and the caller's ``Tenant`` (``auth``: key sources, e.g.
  ``Authorization: Bearer``, or another header a protocol names), the bounded JSON body (``body``), a turn
  reply's headers and SSE response (``replies``).
* ``errors`` (``ApiError``, in no wire shape), ``limits`` (``RequestLimits``), ``settings``
  (``ServerSettings``: how the server listens, what it serves, which limits it enforces), ``text_check``
  (request text is valid Unicode): the base every other part uses.
* ``ui/``: the Gradio chat app (``blocks.build_ui``: layout, event handlers, the learning panel).
* ``app``: ``create_app`` (the protocols' routes + UI + auth on one service), ``ServerThread``, ``serve``,
  ``open_share_link``.

Imports go one way, from ``app`` down to ``errors`` (contracts in ``pyproject.toml`` list the layers).
Importing this package imports none of them.
"""
