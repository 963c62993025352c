"""reconcile(): does a client's visible history continue the stored transcript, or fork it?"""

from __future__ import annotations

import copy

from hermes_core.messages import Message, ToolCall
from server.sessions.reconcile import Reconciliation, StoredMessage, reconcile


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


def _assistant(text: str | None, *call_ids: str) -> Message:
    message: Message = {"role": "assistant", "content": text}
    if call_ids:
        message["tool_calls"] = [_call(call_id) for call_id in call_ids]
    return message


def _call(call_id: str) -> ToolCall:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _tool(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _from_client(message: Message) -> StoredMessage:
    return StoredMessage(message, "client")


def _from_agent(message: Message) -> StoredMessage:
    return StoredMessage(message, "agent")


def _with_hidden_search() -> list[StoredMessage]:
    """A turn in which the agent ran a server tool (c1) before answering."""
    return [
        _from_client(_user("Weather in Paris?")),
        _from_agent(_assistant("Let me check.", "c1")),
        _from_agent(_tool("c1", "sunny, 21C")),
        _from_agent(_assistant("It is sunny.")),
    ]


def test_empty_stored_makes_every_client_message_new() -> None:
    client = [_user("hi"), _assistant("hello"), _user("bye")]
    assert reconcile([], client) == Reconciliation(matched=0, fork_at=None, new_messages=client)


def test_plain_continuation_appends_the_new_user_message() -> None:
    stored = [_from_client(_user("hi")), _from_agent(_assistant("hello"))]
    client = [_user("hi"), _assistant("hello"), _user("how are you?")]
    assert reconcile(stored, client) == Reconciliation(
        matched=2, fork_at=None, new_messages=[_user("how are you?")]
    )


def test_continuation_over_hidden_server_tool_calls() -> None:
    client = [_user("Weather in Paris?"), _assistant("It is sunny."), _user("And tomorrow?")]
    assert reconcile(_with_hidden_search(), client) == Reconciliation(
        matched=2, fork_at=None, new_messages=[_user("And tomorrow?")]
    )


def test_continuation_with_open_webui_replayed_server_tool_calls() -> None:
    client = [
        _user("Weather in Paris?"),
        _assistant("Let me check.", "c1"),
        _tool("c1", "sunny, 21C"),
        _assistant("It is sunny."),
        _user("And tomorrow?"),
    ]
    assert reconcile(_with_hidden_search(), client) == Reconciliation(
        matched=2, fork_at=None, new_messages=[_user("And tomorrow?")]
    )


def test_streaming_client_with_the_concatenated_text_continues() -> None:
    client = [_user("Weather in Paris?"), _assistant("Let me check.It is sunny."), _user("Thanks")]
    assert reconcile(_with_hidden_search(), client).fork_at is None


def test_non_streaming_client_with_only_the_final_text_continues() -> None:
    client = [_user("Weather in Paris?"), _assistant("It is sunny."), _user("Thanks")]
    assert reconcile(_with_hidden_search(), client).fork_at is None


def test_whitespace_differences_do_not_fork() -> None:
    client = [
        _user("Weather  in\nParis? "),
        _assistant("Let me\n\ncheck.\nIt is  sunny."),
        _user("Thanks"),
    ]
    assert reconcile(_with_hidden_search(), client) == Reconciliation(
        matched=2, fork_at=None, new_messages=[_user("Thanks")]
    )


def test_open_webui_details_blocks_do_not_fork() -> None:
    text = (
        '<details type="reasoning" done="true" duration="2">\n<summary>Thought</summary>\n'
        "> weather tool\n</details>\nLet me check.\n"
        '<details type="tool_calls" done="true" id="c1" name="search" arguments="{}" '
        'result="&quot;sunny&quot;">\n<summary>Tool Executed</summary>\n</details>\n'
        "It is sunny."
    )
    client = [_user("Weather in Paris?"), _assistant(text), _user("Thanks")]
    assert reconcile(_with_hidden_search(), client).fork_at is None


def test_other_details_blocks_are_compared() -> None:
    text = "<details><summary>Note</summary>extra</details>It is sunny."
    client = [_user("Weather in Paris?"), _assistant(text), _user("Thanks")]
    assert reconcile(_with_hidden_search(), client).fork_at == 1


def test_edited_earlier_user_message_forks_at_it() -> None:
    stored = [
        _from_client(_user("hi")),
        _from_agent(_assistant("hello")),
        _from_client(_user("what is 2+2?")),
        _from_agent(_assistant("4")),
    ]
    client = [_user("hi"), _assistant("hello"), _user("what is 3+3?")]
    assert reconcile(stored, client) == Reconciliation(
        matched=2, fork_at=2, new_messages=[_user("what is 3+3?")]
    )


def test_regenerate_forks_right_after_the_user_message() -> None:
    client = [_user("Weather in Paris?")]
    assert reconcile(_with_hidden_search(), client) == Reconciliation(
        matched=1, fork_at=1, new_messages=[]
    )


def test_edited_assistant_message_forks_before_its_hidden_tool_calls() -> None:
    client = [_user("Weather in Paris?"), _assistant("It is rainy."), _user("Thanks")]
    assert reconcile(_with_hidden_search(), client) == Reconciliation(
        matched=1, fork_at=1, new_messages=[_assistant("It is rainy."), _user("Thanks")]
    )


def test_an_empty_client_history_forks_at_the_start() -> None:
    assert reconcile(_with_hidden_search(), []) == Reconciliation(
        matched=0, fork_at=0, new_messages=[]
    )


def test_client_tool_round_trip_continues() -> None:
    stored = [_from_client(_user("What is 6*7?")), _from_agent(_assistant(None, "k1"))]
    client = [_user("What is 6*7?"), _assistant(None, "k1"), _tool("k1", "42")]
    assert reconcile(stored, client) == Reconciliation(
        matched=2, fork_at=None, new_messages=[_tool("k1", "42")]
    )


def test_different_visible_tool_calls_fork() -> None:
    stored = [_from_client(_user("What is 6*7?")), _from_agent(_assistant(None, "k1"))]
    client = [_user("What is 6*7?"), _assistant(None, "k2"), _tool("k2", "42")]
    assert reconcile(stored, client).fork_at == 1


def test_changed_client_tool_result_forks_at_the_result() -> None:
    stored = [
        _from_client(_user("What is 6*7?")),
        _from_agent(_assistant(None, "k1")),
        _from_client(_tool("k1", "42")),
        _from_agent(_assistant("It is 42.")),
    ]
    client = [_user("What is 6*7?"), _assistant(None, "k1"), _tool("k1", "43")]
    # The agent's own assistant message is kept; the client's new result answers its call.
    assert reconcile(stored, client) == Reconciliation(
        matched=2, fork_at=2, new_messages=[_tool("k1", "43")]
    )


def test_fork_never_splits_tool_calls_from_their_results() -> None:
    # One assistant message called a client tool (k1) and a server tool (c1); c1's result was
    # stored after k1's. Forking at the changed k1 result would keep the call to c1 unanswered.
    stored = [
        _from_client(_user("Compute and search")),
        _from_agent(_assistant(None, "k1", "c1")),
        _from_client(_tool("k1", "42")),
        _from_agent(_tool("c1", "found")),
        _from_agent(_assistant("Done.")),
    ]
    client = [_user("Compute and search"), _assistant(None, "k1"), _tool("k1", "43")]
    assert reconcile(stored, client) == Reconciliation(
        matched=2, fork_at=1, new_messages=[_assistant(None, "k1"), _tool("k1", "43")]
    )


def test_regenerating_after_a_client_tool_result_keeps_the_turn_whole() -> None:
    # The server result (c1) sits between the client result and the final answer; regenerating
    # the answer re-runs the whole turn instead of keeping the call without its result.
    stored = [
        _from_client(_user("Compute and search")),
        _from_agent(_assistant(None, "k1", "c1")),
        _from_client(_tool("k1", "42")),
        _from_agent(_tool("c1", "found")),
        _from_agent(_assistant("Done.")),
    ]
    client = [_user("Compute and search"), _assistant(None, "k1"), _tool("k1", "42")]
    assert reconcile(stored, client) == Reconciliation(
        matched=3, fork_at=1, new_messages=[_assistant(None, "k1"), _tool("k1", "42")]
    )


def test_empty_client_text_does_not_match_a_stored_answer() -> None:
    stored = [_from_client(_user("hi")), _from_agent(_assistant("hello"))]
    client = [_user("hi"), _assistant(""), _user("?")]
    assert reconcile(stored, client).fork_at == 1


def test_inputs_are_not_mutated_and_new_messages_are_the_clients_in_order() -> None:
    stored = _with_hidden_search()
    client = [
        _user("Weather in Paris?"),
        _assistant("It is sunny."),
        _user("And tomorrow?"),
        _assistant("Rain.", "k9"),
        _tool("k9", "ok"),
    ]
    stored_before, client_before = copy.deepcopy(stored), copy.deepcopy(client)

    result = reconcile(stored, client)

    assert stored == stored_before
    assert client == client_before
    assert result.new_messages == client[2:]
    assert all(new is old for new, old in zip(result.new_messages, client[2:], strict=True))


CANCELLED = "Cancelled: the run was interrupted while this tool was running."


def _stopped_turn() -> list[StoredMessage]:
    """A turn stopped while its only server tool call (s1) ran: no text, a cancelled result."""
    return [
        _from_client(_user("Run the long job")),
        _from_agent(_assistant(None, "s1")),
        _from_agent(_tool("s1", CANCELLED)),
    ]


def test_a_stopped_turn_the_client_leaves_out_continues_after_it() -> None:
    # Open WebUI drops the call it marked incomplete, and with it the whole empty turn.
    client = [_user("Run the long job"), _user("Do something else")]
    assert reconcile(_stopped_turn(), client) == Reconciliation(
        matched=2, fork_at=None, new_messages=[_user("Do something else")]
    )


def test_a_stopped_turn_left_out_earlier_in_the_history_still_continues() -> None:
    stored = [
        *_stopped_turn(),
        _from_client(_user("Do something else")),
        _from_agent(_assistant("Done.")),
    ]
    client = [
        _user("Run the long job"),
        _user("Do something else"),
        _assistant("Done."),
        _user("?"),
    ]
    assert reconcile(stored, client) == Reconciliation(
        matched=4, fork_at=None, new_messages=[_user("?")]
    )


def test_a_stopped_turn_with_text_continues_on_its_text() -> None:
    stored = [
        _from_client(_user("Run the long job")),
        _from_agent(_assistant("Starting it.", "s1")),
        _from_agent(_tool("s1", CANCELLED)),
    ]
    client = [_user("Run the long job"), _assistant("Starting it."), _user("Do something else")]
    assert reconcile(stored, client).fork_at is None


def test_regenerating_a_stopped_turn_forks_after_the_user_message() -> None:
    client = [_user("Run the long job")]
    assert reconcile(_stopped_turn(), client) == Reconciliation(
        matched=1, fork_at=1, new_messages=[]
    )


def test_an_edit_after_a_left_out_stopped_turn_keeps_the_stopped_turn() -> None:
    stored = [
        *_stopped_turn(),
        _from_client(_user("Do something else")),
        _from_agent(_assistant("Done.")),
    ]
    client = [_user("Run the long job"), _user("Do another thing")]
    assert reconcile(stored, client) == Reconciliation(
        matched=2, fork_at=3, new_messages=[_user("Do another thing")]
    )


def test_text_after_the_last_stopped_turn_is_kept_as_its_reply() -> None:
    # The reply streamed after the cancelled call, and was stopped too: the client has it.
    client = [_user("Run the long job"), _assistant("Stopped."), _user("Do something else")]
    assert reconcile(_stopped_turn(), client) == Reconciliation(
        matched=2, fork_at=None, new_messages=[_assistant("Stopped."), _user("Do something else")]
    )


def test_an_assistant_text_in_place_of_an_earlier_stopped_turn_forks_before_it() -> None:
    stored = [
        *_stopped_turn(),
        _from_client(_user("Do something else")),
        _from_agent(_assistant("Done.")),
    ]
    client = [_user("Run the long job"), _assistant("Edited."), _user("Do something else")]
    assert reconcile(stored, client) == Reconciliation(
        matched=1, fork_at=1, new_messages=[_assistant("Edited."), _user("Do something else")]
    )


def test_a_reply_stopped_as_it_streamed_after_its_tools_continues_with_the_text_shown() -> None:
    # The server stores the reply only once it is whole: here the run ended on c1's result.
    stored = [
        _from_client(_user("Weather in Paris?")),
        _from_agent(_assistant("Let me check.", "c1")),
        _from_agent(_tool("c1", "sunny, 21C")),
    ]
    client = [
        _user("Weather in Paris?"),
        _assistant("Let me check.", "c1"),
        _tool("c1", "sunny, 21C"),
        _assistant("It is sun"),
        _user("Go on"),
    ]
    assert reconcile(stored, client) == Reconciliation(
        matched=2, fork_at=None, new_messages=[_assistant("It is sun"), _user("Go on")]
    )


def test_more_text_than_a_finished_answer_forks_before_it() -> None:
    stored = [_from_client(_user("hi")), _from_agent(_assistant("hello"))]
    client = [_user("hi"), _assistant("hello"), _assistant("world"), _user("?")]
    assert reconcile(stored, client).fork_at == 1
