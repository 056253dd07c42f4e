"""The server's control routes: ``GET /healthz``, ``GET /v1/models``, ``GET /v1/status`` (``status``, replies
in ``models``), adapter versions and the learning switch, ``/v1/adapters`` and ``/v1/learning``
(``versions``); errors in OpenAI's shape."""

from fastapi import APIRouter

from openclaw_trl.serving.protocols.base import Protocol
from openclaw_trl.serving.protocols.control import status, versions
from openclaw_trl.serving.protocols.openai_errors import error_response

router = APIRouter()
router.include_router(versions.versions_router)
router.include_router(status.router)

PROTOCOL = Protocol(
    "control",
    router,
    ("/healthz", "/v1/models", "/v1/status", "/v1/adapters", "/v1/learning"),
    error_response,
)
