from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel

from server.errors import APIError
from server.settings import ServerSettings

router = APIRouter(prefix="/v1", tags=["models"])

# Fixed so that listings are stable between restarts (clients cache them).
_CREATED = 1_767_225_600


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = _CREATED
    owned_by: str = "hermes-server"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


def _settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


@router.get("/models", response_model=ModelList)
async def list_models(request: Request) -> ModelList:
    """The agent models (profiles) this server offers."""
    return ModelList(data=[Model(id=model_id) for model_id in _settings(request).model_ids])


@router.get("/models/{model_id:path}", response_model=Model)
async def get_model(model_id: str, request: Request) -> Model:
    if model_id not in _settings(request).model_ids:
        raise APIError(
            404, f"The model '{model_id}' does not exist.", param="model", code="model_not_found"
        )
    return Model(id=model_id)
