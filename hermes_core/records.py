"""Records immutable to the type checker, plain slotted dataclasses at run time.

A frozen dataclass sets every field through ``object.__setattr__`` when it is made, which
makes it ~3x dearer to build, and so to copy with ``dataclasses.replace``: the hot path makes
dozens of events a run and copies its request several times (a session's transcript, the
ledger's hook, a budget's limit). :func:`record` gives what frozen gave the code — mypy refuses
any assignment to a field, equality and hashing are by value — without the cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform, overload

_T = TypeVar("_T")


@overload
def record(cls: type[_T], /) -> type[_T]: ...
@overload
def record(*, kw_only: bool = True) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
def record(
    cls: type[_T] | None = None, /, *, kw_only: bool = True
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """A record's dataclass: frozen to the type checker, slotted and hashable by value, not
    frozen at run time."""

    def make(cls: type[_T]) -> type[_T]:
        return dataclass(slots=True, kw_only=kw_only, unsafe_hash=True)(cls)

    return make if cls is None else make(cls)
