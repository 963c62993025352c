"""The shapes of ``/v1/skills`` (as OpenAI's Skills API), with Hermes's drafts."""

from __future__ import annotations

from typing import Literal

from server.protocol.schemas.common import Omittable, Shape


class SkillObject(Shape):
    """A skill (``skill``): a name, a description and numbered versions of its files."""

    id: str
    object: Literal["skill"]
    name: str
    description: str
    """The default version's."""
    created_at: int
    default_version: str
    """The version runs use."""
    latest_version: str
    draft: Omittable[bool] = None
    """Present (true) on a skill the agent wrote and nobody approved yet: kept, not offered to
    runs until ``POST /v1/skills/{id}/approve``. A Hermes extension."""
    origin: Omittable[Literal["uploaded", "agent"]] = None
    """Where a draft came from (present with ``draft``). A Hermes extension."""


class SkillList(Shape):
    object: Literal["list"]
    data: list[SkillObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class SkillDeleted(Shape):
    id: str
    object: Literal["skill.deleted"]
    deleted: bool


class SkillUpdate(Shape):
    default_version: str
    """The version runs use from now on."""


class SkillVersionObject(Shape):
    """One version of a skill (``skill.version``)."""

    id: str
    object: Literal["skill.version"]
    skill_id: str
    version: str
    name: str
    description: str
    created_at: int


class SkillVersionList(Shape):
    object: Literal["list"]
    data: list[SkillVersionObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class SkillVersionDeleted(Shape):
    id: str
    object: Literal["skill.version.deleted"]
    deleted: bool
    version: str
