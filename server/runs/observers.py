"""Run observers, and handing each event only to those that read its kind.

Every event of every run passes the run manager's observers (metrics, the session journal,
the usage ledger, webhooks, skill extraction, replicas' event log, traces). Most read a few
kinds: the ledger only a run's ending, the journal four kinds, webhooks two. A stream's
events are mostly text deltas, which only metrics (the first token) and the replicas' log
read; calling every observer for each of them, to have most return at once, cost a run
about a hundred calls. An observer says what it reads with :func:`observes`, and
:class:`Observers` keeps, per event kind, the observers that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from hermes_core.events import AgentEvent

F = TypeVar("F", bound=Callable[..., object])
Observer = TypeVar("Observer", bound=Callable[..., object])
"""A run observer (``server.runs.manager.RunObserver``)."""

KINDS_ATTRIBUTE = "observed_kinds"


def observes(*kinds: type[AgentEvent]) -> Callable[[F], F]:
    """Mark a run observer (a function, or a method: the mark is on its function) as reading
    only events of ``kinds``: the run manager hands it no other. Unmarked observers read
    every kind. For an observer that is an object, set ``observed_kinds`` on its class."""

    def mark(observer: F) -> F:
        setattr(observer, KINDS_ATTRIBUTE, frozenset(kinds))
        return observer

    return mark


def _reads(observer: Callable[..., object], kind: type[AgentEvent]) -> bool:
    kinds: frozenset[type[AgentEvent]] | None = getattr(observer, KINDS_ATTRIBUTE, None)
    return kinds is None or any(issubclass(kind, read) for read in kinds)


class Observers(Generic[Observer]):
    """The run manager's observers, in order (appended as services open), and per event
    kind the ones that read it (:meth:`of`), worked out once per kind and again after any
    change."""

    __hash__ = None  # type: ignore[assignment]  # compared by what it holds

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self._all = list(observers)
        self._routes: dict[type[AgentEvent], tuple[Observer, ...]] = {}

    def of(self, kind: type[AgentEvent]) -> tuple[Observer, ...]:
        routed = self._routes.get(kind)
        if routed is None:
            routed = self._routes[kind] = tuple(o for o in self._all if _reads(o, kind))
        return routed

    def append(self, observer: Observer) -> None:
        self._all.append(observer)
        self._routes.clear()

    def remove(self, observer: Observer) -> None:
        self._all.remove(observer)
        self._routes.clear()

    def __iter__(self) -> Iterator[Observer]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, observer: object) -> bool:
        return observer in self._all

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Observers):
            return self._all == other._all
        return isinstance(other, list) and self._all == other
