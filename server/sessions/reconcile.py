"""Decide whether a client's chat history continues a stored session or diverges from it.

A chat-completions client resends its *visible* history on every turn. The server stores the
session's *full* transcript, which also holds what the client never saw: tool calls the server's
agent ran itself, and their results. So the two cannot be compared message by message. Both are
projected into visible items (user turns, client-tool results, assistant turns with their visible
tool calls) and compared item by item:

- if the client's history covers every stored item, the run continues on the stored transcript
  (hidden parts included) plus the client's new messages;
- otherwise the client edited or regenerated something, and a child session forks where the
  histories part, keeping the stored messages before that point.

A stored assistant turn that showed the client nothing — no text, only the server's own tool
calls — is covered when the client's history leaves it out and goes on with something else than
an assistant turn. That is a stopped turn: Open WebUI drops a tool call it marked incomplete when
its user pressed Stop, and a turn that held nothing else is then not replayed at all. Its calls
did happen (their stored results say they were cancelled), so the next turn continues after
them instead of forking them away and asking the model the same thing again. Likewise, when the
last run ended on its own tool result without an answer (stopped or failed as its reply
streamed), a client turn holding that turn plus the start of a reply continues, with that
partial reply kept as the client's.

Pure and synchronous: no I/O, and neither input is mutated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hermes_core.messages import Message, text_of
from hermes_core.persistence import StoredMessage

__all__ = ["Reconciliation", "StoredMessage", "reconcile"]


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """How a request's history relates to the stored transcript."""

    matched: int
    """How many visible items of the stored transcript the client's history matched."""
    fork_at: int | None
    """``None``: the client continues the stored transcript. Else the index in ``stored`` where a
    child session branches: it keeps ``stored[:fork_at]``."""
    new_messages: list[Message]
    """The client's messages to append after the kept stored messages."""


# Open WebUI folds tool calls and reasoning into the assistant text as <details> blocks; the stored
# transcript has them as structured data, so they are dropped before comparing. Other blocks stay.
_WEBUI_BLOCK = re.compile(
    r"""<details\b[^>]*?\btype=["']?(?:tool_calls|reasoning)\b[^>]*>.*?</details>""",
    re.DOTALL,
)

ItemKind = Literal["user", "tool", "assistant"]


@dataclass(frozen=True, slots=True)
class _Item:
    """A visible item, and the range ``[start, end)`` of the messages it was projected from."""

    kind: ItemKind
    start: int
    end: int
    text: str
    """Normalised text; for an assistant item, the concatenation of its messages' texts."""
    last_text: str = ""
    """Assistant items: the last message's text, if any (a non-streaming client keeps only that)."""
    call_id: str = ""
    """Tool items: the call the result answers."""
    call_ids: frozenset[str] = frozenset()
    """Assistant items: the ids of their visible tool calls."""


def reconcile(
    stored: Sequence[StoredMessage], client: Sequence[Message], *, behind: bool = False
) -> Reconciliation:
    """Compare the client's history (system messages removed) with the stored transcript.
    ``behind``: the stored transcript's last answer was written while the client's turn
    waited for the turn writing it, so the client could not have it yet."""
    messages = [entry.message for entry in stored]
    stored_hidden = [_is_agent_tool(entry) for entry in stored]
    # Server-run calls, by the ids their agent-produced results answer. A client that replays them
    # (Open WebUI) must compare equal to one that never saw them.
    hidden_calls = frozenset(
        call_id
        for message, hidden in zip(messages, stored_hidden, strict=True)
        if hidden and (call_id := message.get("tool_call_id"))
    )
    client_hidden = [
        message["role"] == "tool" and message.get("tool_call_id") in hidden_calls
        for message in client
    ]
    stored_items = _project(messages, stored_hidden, hidden_calls)
    client_items = _project(client, client_hidden, hidden_calls)
    pairs = _common_prefix(stored_items, client_items)
    new_from: int | None = None
    if len(pairs) == len(stored_items) - 1 and stored_hidden[-1]:
        # The last run ended on its own tool result, without an answer (it was stopped, or it
        # failed): the client may hold part of a reply the server never stored.
        at = _next_client(pairs)
        if at < len(client_items):
            new_from = _stopped_reply(stored_items[-1], client_items[at], client)
            if new_from is not None:
                pairs.append(at)
    matched = len(pairs)
    if behind and new_from is None and matched == len(stored_items) - 1:
        # The client sent its next message while the last answer was being made: it comes
        # after that answer, not in place of it.
        at = _next_client(pairs)
        last = stored_items[-1]
        if last.kind == "assistant" and at < len(client_items) and client_items[at].kind == "user":
            pairs.append(None)
            matched, new_from = len(pairs), client_items[at].start

    if matched == len(stored_items):
        if new_from is None:
            new_from = _client_end(pairs, client_items)
        return Reconciliation(matched=matched, fork_at=None, new_messages=list(client[new_from:]))

    fork_at, new_from = _fork_point(messages, client, stored_items, client_items, pairs)
    return Reconciliation(matched=matched, fork_at=fork_at, new_messages=list(client[new_from:]))


def _is_agent_tool(entry: StoredMessage) -> bool:
    return entry.source == "agent" and entry.message["role"] == "tool"


def _normalise(text: str) -> str:
    """Text for comparison only: without Open WebUI's blocks, and without any whitespace, since
    clients join streamed chunks and line breaks differently."""
    return "".join(_WEBUI_BLOCK.sub("", text).split())


def _project(
    messages: Sequence[Message], hidden: Sequence[bool], hidden_calls: frozenset[str]
) -> list[_Item]:
    """The visible items of ``messages``; ``hidden[i]`` marks the hidden tool messages."""
    items: list[_Item] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if message["role"] == "assistant":
            # Consecutive assistant messages, and the hidden tool results among and right after
            # them, are one turn: a client may show all its text or only the final answer.
            end = index + 1
            while end < len(messages) and (messages[end]["role"] == "assistant" or hidden[end]):
                end += 1
            items.append(_assistant_item(messages, index, end, hidden_calls))
            index = end
            continue
        text = _normalise(text_of(message.get("content")))
        if message["role"] == "user":
            items.append(_Item("user", index, index + 1, text))
        elif message["role"] == "tool" and not hidden[index]:
            call_id = message.get("tool_call_id", "")
            items.append(_Item("tool", index, index + 1, text, call_id=call_id))
        index += 1  # anything else (a stray hidden result, a system message) is not visible
    return items


def _assistant_item(
    messages: Sequence[Message], start: int, end: int, hidden_calls: frozenset[str]
) -> _Item:
    turn = [message for message in messages[start:end] if message["role"] == "assistant"]
    texts = [_normalise(text_of(message.get("content"))) for message in turn]
    call_ids = frozenset(
        call["id"]
        for message in turn
        for call in message.get("tool_calls") or []
        if call["id"] not in hidden_calls
    )
    last_text = next((text for text in reversed(texts) if text), "")
    return _Item("assistant", start, end, "".join(texts), last_text=last_text, call_ids=call_ids)


def _matches(stored: _Item, client: _Item) -> bool:
    if stored.kind != client.kind:
        return False
    if stored.kind == "assistant":
        # With no stored text both alternatives are "", so an empty client text matches only then.
        texts_match = client.text in (stored.text, stored.last_text)
        return texts_match and client.call_ids == stored.call_ids
    return stored.text == client.text and stored.call_id == client.call_id


def _unseen(item: _Item) -> bool:
    """An assistant turn that showed the client nothing: no text, no calls of the client's."""
    return item.kind == "assistant" and not item.text and not item.call_ids


def _common_prefix(stored: Sequence[_Item], client: Sequence[_Item]) -> list[int | None]:
    """For each stored item of the common prefix, the index of the client item it matched, or
    None for an unseen stored turn the client's history leaves out (see the module's notes)."""
    pairs: list[int | None] = []
    at = 0
    for stored_item in stored:
        if at >= len(client):
            break
        client_item = client[at]
        if _matches(stored_item, client_item):
            pairs.append(at)
            at += 1
        elif _unseen(stored_item) and client_item.kind != "assistant":
            pairs.append(None)
        else:
            break
    return pairs


def _client_end(pairs: Sequence[int | None], client_items: Sequence[_Item]) -> int:
    """Where the client's messages after the matched prefix start."""
    seen = [index for index in pairs if index is not None]
    return client_items[seen[-1]].end if seen else 0


def _next_client(pairs: Sequence[int | None]) -> int:
    """The first client item after those ``pairs`` matched."""
    seen = [index for index in pairs if index is not None]
    return seen[-1] + 1 if seen else 0


def _client_start(
    pairs: Sequence[int | None], turn: int, client_items: Sequence[_Item], client_len: int
) -> int:
    """Where, in the client's messages, the stored item ``turn`` of the prefix or what follows
    it begins (a left-out turn has no counterpart: what the client has next stands for it)."""
    following = [index for index in pairs[turn:] if index is not None]
    if following:
        return client_items[following[0]].start
    at = _next_client(pairs[:turn])
    return client_items[at].start if at < len(client_items) else client_len


def _stopped_reply(stored: _Item, client_item: _Item, client: Sequence[Message]) -> int | None:
    """Whether the client's assistant turn is the stored unanswered one, plus the text of the
    reply that was stopped (or failed) as it streamed: then where the client's messages to
    keep start (that reply's message, which the server never stored), else None."""
    if client_item.kind != "assistant" or stored.kind != "assistant":
        return None
    if client_item.call_ids != stored.call_ids:
        return None
    if client_item.text == stored.text:
        return client_item.end
    last = client[client_item.end - 1]
    if last["role"] != "assistant" or last.get("tool_calls"):
        return None
    reply = _normalise(text_of(last.get("content")))
    return client_item.end - 1 if client_item.text == stored.text + reply else None


def _fork_point(
    stored: Sequence[Message],
    client: Sequence[Message],
    stored_items: Sequence[_Item],
    client_items: Sequence[_Item],
    pairs: Sequence[int | None],
) -> tuple[int, int]:
    """Where the child branches in ``stored``, and where its messages start in ``client``."""
    matched = len(pairs)
    first_unmatched = stored_items[matched]
    if first_unmatched.kind == "assistant":
        # Hidden agent messages before a diverging assistant turn belong to that turn: the child
        # runs it again instead of keeping server tool calls the new answer never used.
        fork_at = stored_items[matched - 1].end if matched else 0
    else:
        fork_at = first_unmatched.start
    new_from = _client_start(pairs, matched, client_items, len(client))
    # Never keep an assistant message whose tool results would be left behind: branch before its
    # turn instead, and take that turn from the client's history (it matched the stored one).
    while (split := _split_call(stored, fork_at, client[new_from:])) is not None:
        turn = next(index for index, item in enumerate(stored_items) if item.end > split)
        fork_at = stored_items[turn].start
        new_from = _client_start(pairs, turn, client_items, len(client))
    return fork_at, new_from


def _split_call(stored: Sequence[Message], fork_at: int, new: Sequence[Message]) -> int | None:
    """The first kept assistant message with a stored tool result that the child would lose.

    A result the client's new messages supply instead (a changed client-tool result) is not lost,
    so the agent's own assistant message, with its provider replay data, can be kept.
    """
    child = [*stored[:fork_at], *new]
    answered = {message.get("tool_call_id") for message in child if message["role"] == "tool"}
    lost = {
        message.get("tool_call_id")
        for message in stored[fork_at:]
        if message["role"] == "tool" and message.get("tool_call_id") not in answered
    }
    for index, message in enumerate(stored[:fork_at]):
        if any(call["id"] in lost for call in message.get("tool_calls") or []):
            return index
    return None
