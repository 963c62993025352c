"""Agent events as JSON and back: how a run's events travel to another replica (Redis) and are
replayed there through the same views as live ones.

The encoding is the native stream's (``dataclasses.asdict``). Decoding follows each event
class's type hints: nested dataclasses (usage, call records, sources), enums, and the event a
sub-agent reported; messages and tool calls stay the plain dicts they are.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from typing import Any, get_args, get_origin

from hermes_core import events
from hermes_core.events import AgentEvent
from hermes_core.json_codec import dumps

EVENT_CLASSES: dict[str, type[Any]] = {
    cls.__dataclass_fields__["kind"].default: cls for cls in get_args(AgentEvent)
}
"""``kind`` → event class, for every event a run says."""


def encode(event: AgentEvent) -> bytes:
    """As the native stream's JSON (orjson writes dataclasses and enums as they are)."""
    return dumps(event)


def decode(text: str | bytes) -> AgentEvent:
    """The event ``text`` encodes; ``ValueError`` if it is not one."""
    return from_json(json.loads(text))


def from_json(data: Any) -> AgentEvent:
    """The event of a parsed JSON object; ``ValueError`` if it is not one."""
    if not isinstance(data, dict):
        raise ValueError("an event is a JSON object")
    return _event(data)


def _event(data: dict[str, Any]) -> AgentEvent:
    cls = EVENT_CLASSES.get(str(data.get("kind")))
    if cls is None:
        raise ValueError(f"unknown event kind {data.get('kind')!r}")
    event: AgentEvent = _dataclass(cls, data)
    return event


def _dataclass(cls: type[Any], data: dict[str, Any]) -> Any:
    hints = _hints(cls)
    values = {
        field.name: _value(hints[field.name], data[field.name])
        for field in dataclasses.fields(cls)
        if field.name in data and field.init
    }
    return cls(**values)


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls, vars(events))
    return hints


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in get_args(hint) if arg is not type(None)]
        if all(dataclasses.is_dataclass(m) and "kind" in m.__dataclass_fields__ for m in members):
            return _event(value)  # AgentEvent: a sub-agent's event
        return _value(members[0], value) if len(members) == 1 else value
    if origin is list:
        (item,) = get_args(hint) or (Any,)
        return [_value(item, element) for element in value]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(hint, value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value
