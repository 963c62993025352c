"""What the configuration keeps, and for how long: ``retention:`` and each profile's own.

A profile's ``retention`` overrides the top-level one for that profile's sessions, runs and
approvals, field by field: a field it sets (``null`` too: kept forever) is its own, one it
leaves out is the top-level one's. Uploaded files belong to no profile (``files_days`` is
top-level only). A sweep turns the days into a :class:`Horizon` at the time it starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hermes_core.persistence.retention import Horizon

if TYPE_CHECKING:
    from server.config import HermesConfig

DAY = 86400.0
KINDS = ("sessions", "runs", "approvals")


@dataclass(frozen=True, slots=True)
class Rule:
    """How long one kind of row is kept: ``days`` (None: forever), or a profile's own."""

    days: float | None = None
    by_profile: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.days is None and all(days is None for days in self.by_profile.values())

    def horizon(self, now: float) -> Horizon:
        """Rows older than this (UNIX times, by profile) are past retention at ``now``."""
        return Horizon(
            default=_before(now, self.days),
            by_profile={name: _before(now, days) for name, days in self.by_profile.items()},
        )


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    sessions: Rule = field(default_factory=Rule)
    """Sessions by the time they were last updated (with their transcripts, todos,
    approvals, and the workspace of a conversation none of whose sessions is left)."""
    runs: Rule = field(default_factory=Rule)
    """Run records by the time they ended."""
    approvals: Rule = field(default_factory=Rule)
    """Approvals by the time they were asked."""
    files_days: float | None = None
    """Uploaded files by the time they were uploaded."""

    @property
    def empty(self) -> bool:
        """Everything is kept forever: a sweep has nothing to do."""
        rules = (self.sessions, self.runs, self.approvals)
        return self.files_days is None and all(rule.empty for rule in rules)


def retention_policy(config: HermesConfig) -> RetentionPolicy:
    """The configuration's retention (``retention:`` and ``profiles[].retention``)."""
    rules = {}
    for kind in KINDS:
        name = f"{kind}_days"
        rules[kind] = Rule(
            days=getattr(config.retention, name),
            by_profile={
                profile.id: getattr(profile.retention, name)
                for profile in config.profiles
                if profile.retention is not None and name in profile.retention.model_fields_set
            },
        )
    return RetentionPolicy(**rules, files_days=config.retention.files_days)


def _before(now: float, days: float | None) -> float | None:
    return None if days is None else now - days * DAY
