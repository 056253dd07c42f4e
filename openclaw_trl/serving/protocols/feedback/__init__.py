"""Per-turn signals, ``POST /v1/feedback``: the body, replies and refusals (``schema``, shared with the UI)
and the route (``router``); errors in OpenAI's shape."""

from openclaw_trl.serving.protocols.base import Protocol
from openclaw_trl.serving.protocols.feedback.router import router
from openclaw_trl.serving.protocols.openai_errors import error_response

PROTOCOL = Protocol("feedback", router, ("/v1/feedback",), error_response)
