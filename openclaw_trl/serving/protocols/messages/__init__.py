"""The Anthropic Messages API (``anthropic-version: 2023-06-01``) on the chat service.

* ``POST /v1/messages``: a reply as a ``message`` object, or streamed as server-sent events (``reply``);
* ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, the prompt tokens of the rendered chat template.

The request is checked field by field (``schema``) and block by block (``convert``), becomes the ``TurnRequest`` it
means (``turn``) and runs through the same pipeline as ``/v1/chat/completions`` (``router``): sessions, side-call
recognition, limits, per-user keys, the turn stored before the reply leaves and learned from. The reply names
its turn in the ``x-openclaw-turn-id`` / ``x-openclaw-policy-version`` / ``x-openclaw-session-id`` headers and in
its ``openclaw`` object, so ``POST /v1/feedback`` works on it. Errors on these paths are in Anthropic's shape
(``errors``).
"""

from openclaw_trl.serving.protocols.base import Protocol
from openclaw_trl.serving.protocols.messages.errors import error_response
from openclaw_trl.serving.protocols.messages.router import router

PROTOCOL = Protocol("messages", router, ("/v1/messages",), error_response)
