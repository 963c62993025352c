from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from hermes_core.tools.agent_tools import ALWAYS_ON_TOOLS, SKILL_TOOLS
from hermes_core.tools.skills import SKILLS_TOOLSET
from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors
from server.profiles import Profile
from server.services import Services

router = APIRouter(prefix="/v1", tags=["models"], route_class=StrictJSONRoute)

# Fixed so that listings are stable between restarts (clients cache them).
_CREATED = 1_767_225_600


class ModelSkill(BaseModel):
    """One of a profile's own skills (its ``skills.dirs``)."""

    name: str
    description: str


class ModelTools(BaseModel):
    """What the agent behind a model can do (a hermes-server extension)."""

    toolsets: list[str]
    """The toolsets its runs have, e.g. ``files``, ``shell``, ``code``, ``memory``."""
    tools: list[str]
    """The server tools in them (the agent-level ones included), by name."""
    skills: list[ModelSkill] | None = None
    """The profile's own skills, offered to every key (besides a key's own, ``/v1/skills``),
    sorted by name; absent when the profile has skills off."""


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = _CREATED
    owned_by: str = "hermes-server"
    name: str | None = None
    """A display name (Open WebUI shows it)."""
    hermes: ModelTools | None = None


def _model(profile: Profile) -> Model:
    agent_level = [name for name in profile.toolsets if name in ALWAYS_ON_TOOLS]
    if SKILLS_TOOLSET in profile.toolsets:
        agent_level += SKILL_TOOLS
    skills = None
    if profile.skills is not None:
        skills = [
            ModelSkill(name=s.entry.name, description=s.entry.description)
            for s in profile.skills.skills
        ]
    return Model(
        id=profile.id,
        name=profile.description or None,
        hermes=ModelTools(
            toolsets=profile.toolsets,
            tools=sorted([*profile.tools.names, *agent_level]),
            skills=skills,
        ),
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


@router.get(
    "/models",
    response_model=ModelList,
    response_model_exclude_none=True,
    responses=errors(401),
)
async def list_models(
    request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> ModelList:
    """The agent profiles this server offers the caller, one model each."""
    profiles = [p for p in _services(request).profiles if principal.may_use(p.id)]
    return ModelList(data=[_model(p) for p in profiles])


@router.get(
    "/models/{model_id:path}",
    response_model=Model,
    response_model_exclude_none=True,
    responses=errors(401, 404),
)
async def get_model(
    model_id: str, request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> Model:
    profile = _services(request).profile(model_id)
    if profile is None or not principal.may_use(model_id):
        raise APIError(
            404, f"The model '{model_id}' does not exist.", param="model", code="model_not_found"
        )
    return _model(profile)
