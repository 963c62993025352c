from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str = "ok"


@router.get("/health", response_model=Health)
async def health() -> Health:
    """Liveness: the process answers. Needs no API key."""
    return Health()
