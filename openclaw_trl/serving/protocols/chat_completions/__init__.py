"""OpenAI chat completions, ``POST /v1/chat/completions``: the wire schema (``schema``), the body -> the
pipeline's ``TurnRequest`` (``convert``), the reply models (``replies``) and the route (``router``), whose
errors are OpenAI's (``protocols.openai_errors``)."""

from openclaw_trl.serving.protocols.base import Protocol
from openclaw_trl.serving.protocols.chat_completions.router import router
from openclaw_trl.serving.protocols.openai_errors import error_response

PROTOCOL = Protocol("chat_completions", router, ("/v1/chat/completions",), error_response)
