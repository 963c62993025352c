"""Cron expressions, read in an IANA time zone.

Five fields (minute, hour, day of month, month, day of week) as in crontab, or six with the
seconds first; each field ``*``, a value, a range ``a-b``, a step ``*/n`` or ``a-b/n`` or
``a/n``, or a list of those; month and weekday names (``jan``, ``mon``) and ``7`` for Sunday;
and the shorthands ``@yearly``, ``@monthly``, ``@weekly``, ``@daily``, ``@hourly``. When both
day fields are restricted, a day matches either (as crontab does).

Times are wall-clock times of the zone: a time that does not exist (a spring-forward gap) is
skipped, one that occurs twice (fall back) fires once, at its first occurrence. Written here
rather than taken from a library: the grammar is small, and the zone handling is zoneinfo's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_WEEKDAYS = {name: n for n, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_SEARCH_DAYS = 366 * 8 + 2
"""How far ahead a next time is looked for: a 29 February on a given weekday recurs within
28 years, but a schedule that quiet is refused; eight years hold every leap day."""
_UTC = dt.UTC


class BadSchedule(ValueError):
    """The expression or the time zone is not one this reader accepts (the message says why)."""


def _field(text: str, low: int, high: int, names: dict[str, int], what: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise BadSchedule(f"empty item in the {what} field")
        body, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not _digits(step_text) or int(step_text) == 0:
                raise BadSchedule(f"bad step '{step_text}' in the {what} field")
            step = int(step_text)
        if body == "*":
            first, last = low, high
        else:
            start_text, dash, end_text = body.partition("-")
            first = _value(start_text, low, high, names, what)
            last = _value(end_text, low, high, names, what) if dash else first
            if dash and last < first:
                raise BadSchedule(f"range '{body}' runs backwards in the {what} field")
            if step_text and not dash:
                last = high  # "a/n": from a, every n
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _digits(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also takes ``²``, which ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def _value(text: str, low: int, high: int, names: dict[str, int], what: str) -> int:
    lowered = text.lower()
    if lowered in names:
        return names[lowered]
    if not _digits(text):
        raise BadSchedule(f"'{text}' is not a value of the {what} field")
    number = int(text)
    if not low <= number <= high:
        raise BadSchedule(f"{number} is outside {low}-{high} in the {what} field")
    return number


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed expression in its zone: :meth:`next_after` gives its firing times."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 is Sunday."""
    any_day: bool
    any_weekday: bool
    zone: ZoneInfo

    def _day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def _times(self, start: tuple[int, int, int] | None) -> Iterator[tuple[int, int, int]]:
        for hour in self.hours:
            if start is not None and hour < start[0]:
                continue
            same_hour = start is not None and hour == start[0]
            for minute in self.minutes:
                if same_hour and start is not None and minute < start[1]:
                    continue
                same_minute = same_hour and start is not None and minute == start[1]
                for second in self.seconds:
                    if same_minute and start is not None and second < start[2]:
                        continue
                    yield hour, minute, second

    def next_after(self, after: float) -> float | None:
        """The first firing time strictly after ``after`` (UNIX seconds), or None when there
        is none within eight years."""
        local = dt.datetime.fromtimestamp(int(after) + 1, self.zone)
        day = local.date()
        start: tuple[int, int, int] | None = (local.hour, local.minute, local.second)
        for _ in range(_SEARCH_DAYS):
            if self._day_matches(day):
                for hour, minute, second in self._times(start):
                    wall = dt.datetime(
                        day.year, day.month, day.day, hour, minute, second, tzinfo=self.zone
                    )
                    back = wall.astimezone(_UTC).astimezone(self.zone)
                    if back.replace(tzinfo=None) != wall.replace(tzinfo=None):
                        continue  # in a spring-forward gap: this wall time does not exist
                    at = wall.timestamp()
                    if at > after:
                        return at
            start = None
            day += dt.timedelta(days=1)
        return None


def parse(expression: str, timezone: str = "UTC") -> Schedule:
    """``expression`` in ``timezone`` (an IANA name); :class:`BadSchedule` if either is bad,
    or the expression never fires."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory's name
        raise BadSchedule(
            f"unknown time zone '{timezone}' (an IANA name, e.g. Europe/Paris)"
        ) from None
    text = expression.strip()
    text = _SHORTHANDS.get(text.lower(), text)
    fields = text.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        raise BadSchedule("a schedule has 5 fields (minute hour day month weekday), or 6")
    second, minute, hour, day, month, weekday = fields
    days = _field(day, 1, 31, {}, "day of month")
    weekdays = {d % 7 for d in _field(weekday, 0, 7, _WEEKDAYS, "day of week")}
    schedule = Schedule(
        seconds=tuple(sorted(_field(second, 0, 59, {}, "second"))),
        minutes=tuple(sorted(_field(minute, 0, 59, {}, "minute"))),
        hours=tuple(sorted(_field(hour, 0, 23, {}, "hour"))),
        days=days,
        months=_field(month, 1, 12, _MONTHS, "month"),
        weekdays=frozenset(weekdays),
        any_day=day.startswith("*"),
        any_weekday=weekday.startswith("*"),
        zone=zone,
    )
    if schedule.next_after(0) is None:
        raise BadSchedule("this schedule never fires")
    return schedule
