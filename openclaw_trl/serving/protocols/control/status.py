"""``GET /healthz`` (always open), ``GET /v1/models`` and ``GET /v1/status`` (the learning's live view)."""

from __future__ import annotations

import asyncio
import math

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from openclaw_trl.serving.http.auth import AUTHORIZED, service_of
from openclaw_trl.serving.protocols.control.models import Health, ModelCard, ModelList

router = APIRouter()


@router.get("/healthz")
async def healthz(request: Request):
    """Open to anyone: the policy version of a server with one user, 0 for a server with several (whose
    versions are each user's own, read with their key from ``/v1/status``)."""
    only = request.app.state.tenants.get(None)
    return Health(
        policy_version=getattr(only.service.engine, "policy_version", 0) if only else 0
    ).model_dump()


@router.get("/v1/models", dependencies=AUTHORIZED)
async def models(request: Request):
    data = [ModelCard(id=name) for name in service_of(request).settings.model_names]
    return ModelList(data=data).model_dump()


def _finite(value):
    """JSON-safe status: NaN/inf metrics (e.g. a hint rate before any hint) become null, numpy scalars floats."""
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()  # numpy / torch scalars
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


_service = service_of  # the name the status route reads the app's ChatService by


@router.get("/v1/status", dependencies=AUTHORIZED)
async def status(request: Request):
    return JSONResponse(_finite(await asyncio.to_thread(_service(request).status)))
