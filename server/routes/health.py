from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from server.http.input_text import StrictJSONRoute

router = APIRouter(tags=["health"], route_class=StrictJSONRoute)


class Health(BaseModel):
    status: str = "ok"


@router.get("/health", response_model=Health)
async def health() -> Health:
    """Liveness: the process answers. Needs no API key."""
    return Health()
