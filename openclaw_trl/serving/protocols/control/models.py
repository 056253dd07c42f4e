"""The replies of the control routes: ``GET /v1/models`` (``ModelList``) and ``GET /healthz`` (``Health``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "openclaw-trl"


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    """``GET /healthz``."""

    ok: bool = True
    policy_version: int
