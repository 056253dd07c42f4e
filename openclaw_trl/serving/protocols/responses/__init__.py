"""The OpenAI Responses API, ``POST /v1/responses`` and ``GET /v1/responses/{id}``: the request schema and
input items (``schema``), the request -> ``TurnRequest`` (``convert``), the response object's models
(``models``), its output items and stream events (``output``), one response's turn (``turns``) and the routes
(``router``); errors in OpenAI's shape."""

from openclaw_trl.serving.protocols.base import Protocol
from openclaw_trl.serving.protocols.openai_errors import error_response
from openclaw_trl.serving.protocols.responses.router import router

PROTOCOL = Protocol("responses", router, ("/v1/responses",), error_response)
