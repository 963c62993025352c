"""``GET /v1/usage``: what the usage ledger holds for the caller's key (every key's, for an
admin key), summed per day, end user, profile, provider or model (docs/usage.md)."""

from __future__ import annotations

import datetime
import functools
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hermes_core.persistence.usage import GROUPS, UsageLine
from hermes_core.usage import Usage
from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors
from server.protocol.schemas.usage import UsageReport
from server.services import Services
from server.serving.end_users import end_user_id

router = APIRouter(prefix="/v1/usage", tags=["usage"], route_class=StrictJSONRoute)
Owner = Annotated[Principal, Depends(require_principal)]

DEFAULT_DAYS = 30
"""Days summed when ``from`` is not given: the last 30, today included."""
MAX_LINES = 10_000
"""Lines one answer holds (a year of days × a few dozen models fits; more says has_more)."""
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_NAME = 256
"""The longest key, end user, model or profile name a filter may give."""


@router.get("", response_model=UsageReport, responses=errors(400, 401, 403))
async def usage_report(
    request: Request,
    principal: Owner,
    start: Annotated[
        str | None,
        Query(
            alias="from",
            max_length=10,
            description="The first day (YYYY-MM-DD, UTC). Default: 29 days before `to`.",
        ),
    ] = None,
    end: Annotated[
        str | None,
        Query(
            alias="to",
            max_length=10,
            description="The last day, inclusive (YYYY-MM-DD, UTC). Default: today.",
        ),
    ] = None,
    group_by: Annotated[
        list[str] | None,
        Query(
            description="Fields to sum per: day, end_user, model, provider, profile, key "
            "(comma-separated or repeated; empty for one line). Default: day.",
        ),
    ] = None,
    key: Annotated[
        str | None,
        Query(
            max_length=_NAME,
            description="Another key's usage (an admin key's privilege; an admin key that "
            "names none sees every key's).",
        ),
    ] = None,
    end_user: Annotated[
        str | None,
        Query(max_length=_NAME, description="Only this end user's runs."),
    ] = None,
    model: Annotated[
        str | None,
        Query(max_length=_NAME, description="Only calls served by this provider model."),
    ] = None,
    profile: Annotated[
        str | None, Query(max_length=_NAME, description="Only runs of this profile.")
    ] = None,
) -> dict[str, Any]:
    """The caller's key's model calls, tokens and cost, summed per group, and the totals."""
    viewer = end_user_id(request, principal)
    if viewer is not None:
        end_user, key = _own_only(principal, viewer, end_user, key)
    owner = _owner(principal, key)
    until = _day(end, "to") if end is not None else _today()
    since = _day(start, "from") if start is not None else _days_before(until, DEFAULT_DAYS - 1)
    if since > until:
        raise APIError(400, "'from' must not be after 'to'.", param="from")
    groups = _groups(group_by)
    store = _services(request).store
    lines: list[UsageLine] = []
    totals: list[UsageLine] = []
    if store is not None:
        report = functools.partial(
            store.usage.report,
            owner=owner,
            since_day=since.isoformat(),
            until_day=until.isoformat(),
            end_user=end_user,
            model=model,
            profile=profile,
        )
        lines = await report(group_by=groups, limit=MAX_LINES + 1)
        totals = await report(group_by=[]) if groups else lines
    return {
        "object": "list",
        "data": [_line(line) for line in lines[:MAX_LINES]],
        "totals": _sums(totals[0] if totals else None),
        "group_by": groups,
        "start_day": since.isoformat(),
        "end_day": until.isoformat(),
        "has_more": len(lines) > MAX_LINES,
    }


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _owner(principal: Principal, key: str | None) -> str | None:
    """Whose rows: the caller's key's; with ``key``, that key's, and for an admin key that
    names none, every key's (None)."""
    if principal.admin:
        return key
    if key is not None and key != principal.name:
        raise APIError(
            403,
            "Only an admin API key (api_keys[].admin: true) may read another key's usage.",
            param="key",
            code="admin_key_required",
        )
    return principal.name


def _own_only(
    principal: Principal, viewer: str, end_user: str | None, key: str | None
) -> tuple[str, str]:
    """The filters of a request for the end user ``viewer``: their own usage alone, as runs
    show them theirs alone (docs/end-users.md); the key's other end users' names and spend
    are not theirs to learn. Naming anyone else is a 403, whoever it is."""
    if end_user not in (None, viewer) or key not in (None, principal.name):
        raise APIError(
            403,
            "A request naming an end user reads only that end user's usage.",
            param="end_user" if end_user not in (None, viewer) else "key",
            code="end_user_not_allowed",
        )
    return viewer, principal.name


def _day(value: str, param: str) -> datetime.date:
    if _DAY.fullmatch(value):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise APIError(400, f"'{param}' must be a day, YYYY-MM-DD (UTC).", param=param)


def _days_before(day: datetime.date, days: int) -> datetime.date:
    """``days`` before ``day``, or the calendar's first day (a ``to`` in year 1 is a day)."""
    gap = min(days, (day - datetime.date.min).days)
    return day - datetime.timedelta(days=gap)


def _today() -> datetime.date:
    return datetime.datetime.now(datetime.UTC).date()


def _groups(given: list[str] | None) -> list[str]:
    if given is None:
        return ["day"]
    groups: list[str] = []
    for value in given[: len(GROUPS) * 2]:  # more values than that can only repeat or err
        for name in value.split(",", len(GROUPS) * 2):
            name = name.strip()
            if not name or name in groups:
                continue
            if name not in GROUPS:
                choices = ", ".join(GROUPS)
                raise APIError(
                    400, f"'group_by' takes {choices}; not {name[:64]!r}.", param="group_by"
                )
            groups.append(name)
    return groups


def _line(line: UsageLine) -> dict[str, Any]:
    grouped: dict[str, Any] = dict(line.group)
    if "end_user" in grouped:
        grouped["end_user"] = grouped["end_user"] or None  # '' in the ledger: no end user
    return {**grouped, **_sums(line)}


def _sums(line: UsageLine | None) -> dict[str, Any]:
    usage = line.usage if line is not None else Usage()
    return {
        "calls": line.calls if line is not None else 0,
        **usage.as_dict(),
        "total_tokens": usage.total_tokens,
        "cost_usd": line.cost_usd if line is not None else 0.0,
    }
