"""Where an answer cites a source: its URL, bare or as a Markdown link's target."""

from __future__ import annotations

from hermes_core.events import (
    ExitReason,
    RunFinished,
    Source,
    SourcesFound,
    SubagentEvent,
    TextDelta,
)
from hermes_core.usage import Usage
from server.views.chat import ChatCompletionBuilder
from server.views.citations import cite

PAGE = Source(url="https://example.org/a", title="Page A")
DEEPER = Source(url="https://example.org/a/b", title="Page B")


def spans(text: str, *sources: Source) -> list[str]:
    return [text[c.start_index : c.end_index] for c in cite(text, sources)]


def test_a_markdown_link_is_cited_as_a_whole() -> None:
    assert spans("See [the page](https://example.org/a).", PAGE) == [
        "[the page](https://example.org/a)"
    ]


def test_a_bare_url_is_cited_without_the_sentence_end() -> None:
    assert spans("Source: https://example.org/a. Done", PAGE) == ["https://example.org/a"]


def test_a_longer_url_is_not_taken_for_a_shorter_one() -> None:
    assert spans("Read https://example.org/a/b now", PAGE, DEEPER) == ["https://example.org/a/b"]
    assert spans("Read https://example.org/ab now", PAGE) == []


def test_a_trailing_slash_does_not_matter() -> None:
    slashed = Source(url="https://example.org/docs/", title="Docs")
    assert spans("At https://example.org/docs and", slashed) == ["https://example.org/docs"]


def test_every_mention_is_cited_in_text_order() -> None:
    text = "https://example.org/a/b then https://example.org/a"
    citations = cite(text, [PAGE, DEEPER])
    assert [c.url for c in citations] == [DEEPER.url, PAGE.url]
    assert citations[0].title == "Page B"


def test_an_answer_naming_no_source_has_no_citations() -> None:
    assert cite("The keeper was Elsa Marsh.", [PAGE]) == []


def test_an_answer_citing_a_sub_agents_page_is_annotated() -> None:
    found = SourcesFound(
        run_id="r", seq=0, call_id="c", name="web_fetch", sources=[PAGE], read=True
    )
    builder = ChatCompletionBuilder(completion_id="chatcmpl-1", model="m", created=0)
    builder.add(SubagentEvent(run_id="r", seq=1, call_id="d", child_index=0, event=found))
    builder.add(TextDelta(run_id="r", seq=2, text="See https://example.org/a."))
    end = RunFinished(
        run_id="r", seq=3, exit_reason=ExitReason.COMPLETED, final_text="",
        iterations=1, usage=Usage(), model_calls=1,
    )  # fmt: skip
    [annotation] = builder.build(end)["choices"][0]["message"]["annotations"]
    assert annotation["url_citation"]["url"] == PAGE.url
