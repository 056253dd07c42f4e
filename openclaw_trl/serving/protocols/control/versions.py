"""The adapter-version routes: list the published versions, roll back to one, pause and resume learning.

``versions_router`` (mounted by ``create_app`` before the OpenAI routes) answers

* ``GET /v1/adapters``: the last ``adapter_history`` versions, newest first: ``version`` (= ``step``),
  ``created`` (Unix time), ``samples`` (consumed by its update), ``metrics`` (logged at that update),
  ``restored_from`` (a rollback), ``restorable`` (its checkpoint is complete) and ``serving``;
* ``POST /v1/adapters/rollback {"version": v}``: serving and training continue from ``v``; the weights are
  published as the next policy version (``policy_version`` in the answer). The call waits until the trainer
  has done it between two updates (at most ``ROLLBACK_TIMEOUT_S``);
* ``GET /v1/learning``, ``POST /v1/learning {"paused": true | false}``: no update runs while paused
  (serving, judging and collecting go on); the switch outlives a restart and shows in ``/v1/status``.

Bodies are bounded by ``max_request_bytes`` and validated strictly (unknown fields, a version that is not an
integer, a ``paused`` that is not a boolean: 400). Unknown version: 404; a version that cannot be restored or
is the one serving: 400; no trainer on this server, ``adapter_history: 0`` or a rollback already under way:
409; the trainer busy past the timeout: 504 (nothing changed). Errors are OpenAI-style JSON.
"""

from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from openclaw_trl.serving.errors import ApiError, format_validation_error
from openclaw_trl.serving.http.auth import require_api_key, service_of, tenant_of
from openclaw_trl.serving.http.body import json_body
from openclaw_trl.trainer.control import (
    LearningUnavailable,
    NotRestorable,
    RollbackTimeout,
    UnknownVersion,
)

MAX_VERSION = 2**53
"""Largest version number a request may name (a JSON-safe integer)."""


class RollbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = Field(strict=True, ge=0, le=MAX_VERSION)


class LearningBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paused: bool = Field(strict=True)


versions_router = APIRouter(dependencies=[Depends(require_api_key)])


def _learning(request: Request):
    learning = tenant_of(request).learning
    if learning is None:
        raise ApiError(
            409,
            "this server does not train (e.g. openclaw-trl serve): it has no adapter versions or learning "
            "switch; start it with a recipe (python app.py --config ...) to use them",
            "learning_unavailable",
        )
    return learning


async def _body(request: Request, model: type[BaseModel]) -> BaseModel:
    payload = await json_body(request, service_of(request).settings.limits)
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object", "invalid_json")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise format_validation_error(exc) from None


@versions_router.get("/v1/adapters")
async def list_adapters(request: Request):
    learning = _learning(request)
    versions = await asyncio.to_thread(learning.versions)
    return {
        "object": "list",
        "adapter_history": learning.history,
        "serving": learning.serving_version,
        "paused": await asyncio.to_thread(lambda: learning.paused),
        "data": [dataclasses.asdict(v) for v in versions],
    }


@versions_router.post("/v1/adapters/rollback")
async def rollback(request: Request):
    learning = _learning(request)
    body = await _body(request, RollbackBody)
    try:
        result = await asyncio.to_thread(learning.rollback, body.version)
    except UnknownVersion as err:
        raise ApiError(404, str(err), "version_not_found", "version") from None
    except NotRestorable as err:
        raise ApiError(400, str(err), "version_not_restorable", "version") from None
    except LearningUnavailable as err:
        raise ApiError(409, str(err), "learning_unavailable") from None
    except RollbackTimeout as err:
        raise ApiError(504, str(err), "rollback_timeout") from None
    return {"ok": True, **dataclasses.asdict(result)}


@versions_router.get("/v1/learning")
async def learning_state(request: Request):
    learning = _learning(request)
    return {"paused": await asyncio.to_thread(lambda: learning.paused)}


@versions_router.post("/v1/learning")
async def set_learning(request: Request):
    learning = _learning(request)
    body = await _body(request, LearningBody)
    await asyncio.to_thread(learning.set_paused, body.paused)
    return {"ok": True, "paused": body.paused}
