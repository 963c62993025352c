"""The files a run made, as each view announces them (``RunFinished.files``), from literal
events: Responses annotations, chat annotations and Open WebUI's Markdown."""

from __future__ import annotations

from typing import Any, cast

import pydantic
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from hermes_core.events import ExitReason, RunFinished, RunStarted, TextDelta, WorkspaceFile
from hermes_core.usage import Usage
from server.files.links import file_id
from server.views.chat import ChatCompletionBuilder, ChatStreamView
from server.views.file_citations import FileAnnouncer
from server.views.responses import ResponsesView
from tests.server.test_responses_view import make_shell

TEXT = "See out/chart.png."
FILES = [
    WorkspaceFile(path="out/chart.png", bytes=3, created=True),
    WorkspaceFile(path="notes [draft].txt", bytes=5, created=False),
]
STREAM_EVENT: pydantic.TypeAdapter[ResponseStreamEvent] = pydantic.TypeAdapter(ResponseStreamEvent)


def _link(path: str) -> str:
    return f"https://files.example/{path.replace(' ', '%20')}"


ANNOUNCER = FileAnnouncer("cntr_" + "0" * 32, _link)
OPENWEBUI = FileAnnouncer("cntr_" + "0" * 32, _link, openwebui=True)


def _ended(files: list[WorkspaceFile] = FILES) -> RunFinished:
    return RunFinished(
        "run_1",
        2,
        exit_reason=ExitReason.COMPLETED,
        final_text=TEXT,
        iterations=1,
        usage=Usage(),
        model_calls=1,
        files=files,
    )


def _run() -> list[Any]:
    started = RunStarted("run_1", 0, task_id="t", model="m", provider="p", budget=10)
    return [started, TextDelta("run_1", 1, text=TEXT), _ended()]


def _chat(view: ChatStreamView, events: list[Any]) -> list[dict[str, Any]]:
    return [cast(dict[str, Any], frame) for event in events for frame in view.handle(event)]


def test_responses_cite_each_file_where_the_answer_names_it_or_at_its_end() -> None:
    view = ResponsesView(make_shell(), files=ANNOUNCER)
    frames = view.opening() + [f for e in _run() for f in view.handle(e)]
    for frame in frames:
        STREAM_EVENT.validate_python(frame)

    part = view.response["output"][-1]["content"][0]
    assert part["annotations"] == [
        {
            "type": "container_file_citation",
            "container_id": ANNOUNCER.container_id,
            "file_id": file_id("out/chart.png"),
            "filename": "chart.png",
            "start_index": 4,
            "end_index": 17,
        },
        {
            "type": "container_file_citation",
            "container_id": ANNOUNCER.container_id,
            "file_id": file_id("notes [draft].txt"),
            "filename": "notes [draft].txt",
            "start_index": len(TEXT),
            "end_index": len(TEXT),
        },
    ]
    added = [f for f in frames if f["type"] == "response.output_text.annotation.added"]
    assert [f["annotation"] for f in added] == part["annotations"]


def test_open_webui_responses_show_the_files_as_markdown_in_the_answer() -> None:
    view = ResponsesView(make_shell(), progress="openwebui", files=OPENWEBUI)
    for event in _run():
        view.handle(event)

    part = view.response["output"][-1]["content"][0]
    assert part["text"] == (
        f"{TEXT}\n\n![chart.png]({_link('out/chart.png')})\n\n"
        f"[notes \\[draft\\].txt]({_link('notes [draft].txt')})\n"
    )
    assert part["annotations"] == []


def test_a_chat_stream_carries_the_files_as_url_citations_with_the_container_facts() -> None:
    view = ChatStreamView(completion_id="c", model="m", created=1, files=ANNOUNCER)
    frames = _chat(view, _run())
    for frame in frames:
        ChatCompletionChunk.model_validate(frame)

    (annotated,) = [f for f in frames if f["choices"] and "annotations" in f["choices"][0]["delta"]]
    chart = annotated["choices"][0]["delta"]["annotations"][0]
    assert chart["url_citation"] == {
        "url": _link("out/chart.png"),
        "title": "chart.png",
        "start_index": 4,
        "end_index": 17,
    }
    assert chart["container_file_citation"]["file_id"] == file_id("out/chart.png")


def test_open_webui_chat_ends_the_answer_with_the_image_inline_and_the_file_linked() -> None:
    view = ChatStreamView(completion_id="c", model="m", created=1, openwebui=True, files=OPENWEBUI)
    frames = _chat(view, _run())

    content = "".join(
        f["choices"][0]["delta"].get("content", "") for f in frames if f.get("choices")
    )
    assert content.endswith(
        f"\n\n![chart.png]({_link('out/chart.png')})\n\n"
        f"[notes \\[draft\\].txt]({_link('notes [draft].txt')})\n"
    )
    assert not any("annotations" in f["choices"][0]["delta"] for f in frames if f.get("choices"))


def test_the_chat_completion_carries_the_same_annotations() -> None:
    builder = ChatCompletionBuilder(completion_id="c", model="m", created=1, files=ANNOUNCER)
    for event in _run()[:-1]:
        builder.add(event)

    completion = ChatCompletion.model_validate(builder.build(_ended()))

    annotations = completion.choices[0].message.annotations or []
    assert [a.url_citation.title for a in annotations] == ["chart.png", "notes [draft].txt"]


def test_a_run_that_made_no_files_announces_none() -> None:
    view = ChatStreamView(completion_id="c", model="m", created=1, files=ANNOUNCER)
    frames = _chat(view, [*_run()[:-1], _ended([])])
    assert not any("annotations" in f["choices"][0]["delta"] for f in frames if f.get("choices"))
