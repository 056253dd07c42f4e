"""``POST /v1/responses`` and ``GET /v1/responses/{id}`` (the OpenAI Responses API, ``turns``)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from openclaw_trl.serving.http.auth import AUTHORIZED, service_of
from openclaw_trl.serving.http.body import json_body
from openclaw_trl.serving.http.replies import streaming_response, turn_headers
from openclaw_trl.serving.protocols.responses import turns

router = APIRouter()


@router.post("/v1/responses", dependencies=AUTHORIZED)
async def create_response(request: Request):
    service = service_of(request)
    payload = await json_body(request, service.settings.limits)
    job = await asyncio.to_thread(turns.prepare, service, payload, request.headers)
    if job.stream:
        return streaming_response(job.chat, turns.stream_events(service, job))
    body, result = await turns.respond(service, job)
    return JSONResponse(body.model_dump(), headers=turn_headers(job.chat, result))


@router.api_route("/v1/responses/{response_id}", methods=["GET", "DELETE"], dependencies=AUTHORIZED)
async def response_by_id(request: Request, response_id: str):
    return await asyncio.to_thread(turns.by_id, service_of(request), response_id, request.method)
