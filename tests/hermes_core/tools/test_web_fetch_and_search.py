"""``web_fetch`` reads pages as the model needs them, within its caps; ``web_search`` asks
each backend in its documented shape. Real HTTP against pages and fake backends on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from hermes_core.tools.web.fetch import FetchFailed, FetchLimits, WebFetcher
from hermes_core.tools.web.guard import AddressPolicy
from hermes_core.tools.web.search import SearchFailed, SearchSettings, search_backend
from tests.web_site import WebSite, served_page, web_site

LOOPBACK = AddressPolicy.allowing(["127.0.0.1"])


@pytest.fixture(scope="module")
def site() -> Iterator[WebSite]:
    with web_site() as served:
        yield served


def fetcher(**limits: float) -> WebFetcher:
    return WebFetcher(LOOPBACK, FetchLimits(**limits))  # type: ignore[arg-type]


async def test_an_html_page_becomes_markdown_of_its_main_content(site: WebSite) -> None:
    page = await fetcher().fetch(site.url("/article"))
    assert page.title == "The Lighthouse Keepers of Brightwater"
    assert page.content_type == "text/html"
    assert "112 years" in page.text
    assert "41 volumes" in page.text
    assert "Log in" not in page.text  # the navigation is not content
    assert "<p>" not in page.text


async def test_json_comes_back_as_json_and_text_as_text(site: WebSite) -> None:
    data = await fetcher().fetch(site.url("/data.json"))
    assert json.loads(data.text) == {"keeper": "Elsa Marsh", "volumes": 41}
    notes = await fetcher().fetch(site.url("/notes.txt"))
    assert notes.text == "Plain notes: the lamp burned whale oil."


async def test_an_unknown_charset_is_read_as_utf8(site: WebSite) -> None:
    page = await fetcher().fetch(site.url("/odd-charset"))
    assert page.text == "caf\u00e9"


@pytest.mark.parametrize("charset", ["base64", "rot13", "undefined", "hex"])
@pytest.mark.parametrize("kind", ["text/plain", "application/json"])
async def test_a_charset_that_is_no_text_encoding_is_read_as_utf8(
    site: WebSite, charset: str, kind: str
) -> None:
    # Python knows these codecs, but decoding text with them fails: the fetch failed.
    page = await fetcher().fetch(site.url(f"/codec-charset?charset={charset}&type={kind}"))
    assert "caf\u00e9" in page.text


async def test_content_that_is_not_text_is_described_not_shown(site: WebSite) -> None:
    page = await fetcher().fetch(site.url("/image.png"))
    assert not page.readable
    assert "image/png" in page.text
    assert "not text" in page.text
    assert "PNG" not in page.text


async def test_a_page_larger_than_the_cap_is_cut_and_says_so(site: WebSite) -> None:
    page = await fetcher(max_bytes=10_000).fetch(site.url("/big"))
    assert page.truncated
    assert len(page.text) == 10_000


async def test_redirects_are_followed_up_to_the_cap(site: WebSite) -> None:
    page = await fetcher().fetch(site.url("/redirect?to=/notes.txt"))
    assert page.url == site.url("/notes.txt")
    with pytest.raises(FetchFailed, match="more than 3 redirects"):
        await fetcher(max_redirects=3).fetch(site.url("/loop"))
    assert len(site.asked("/loop")) >= 4


async def test_a_page_too_slow_to_answer_fails_in_time(site: WebSite) -> None:
    with pytest.raises(FetchFailed, match=r"did not answer within 0\.5 seconds"):
        await fetcher(timeout_seconds=0.5).fetch(site.url("/slow?seconds=5"))


async def test_a_missing_page_reports_its_status(site: WebSite) -> None:
    page = await fetcher().fetch(site.url("/nowhere"))
    assert page.status == 404


async def test_searxng_is_asked_for_json_and_its_results_read(site: WebSite) -> None:
    backend = search_backend(SearchSettings(backend="searxng", url=site.base_url))
    results = await backend.search("brightwater lighthouse", 5)
    asked = site.asked("/search")[-1]
    assert asked.query == {"q": ["brightwater lighthouse"], "format": ["json"]}
    assert [r.url for r in results] == [site.url("/article"), site.url("/tides")]
    assert results[0].title == "The Lighthouse Keepers of Brightwater"
    assert results[0].snippet == "The Marsh family kept the Brightwater light for 112 years."


async def test_brave_is_asked_with_its_subscription_token(site: WebSite) -> None:
    settings = SearchSettings(backend="brave", url=site.base_url, api_key="brave-test-key")
    results = await search_backend(settings).search("brightwater", 3)
    asked = site.asked("/res/v1/web/search")[-1]
    assert asked.query == {"q": ["brightwater"], "count": ["3"]}
    assert asked.headers["X-Subscription-Token"] == "brave-test-key"
    assert results[1].title == "Brightwater tide tables"
    assert results[1].snippet == "High and low water at Brightwater harbour."


async def test_tavily_is_asked_with_a_json_body_and_a_bearer_key(site: WebSite) -> None:
    settings = SearchSettings(backend="tavily", url=site.url("/tavily"), api_key="tvly-test-key")
    results = await search_backend(settings).search("brightwater", 1)
    asked = site.asked("/tavily/search")[-1]
    assert asked.method == "POST"
    assert json.loads(asked.body) == {"query": "brightwater", "max_results": 1}
    assert asked.headers["Authorization"] == "Bearer tvly-test-key"
    assert [r.url for r in results] == [site.url("/article")]


async def test_a_backend_refusing_the_key_is_a_clear_failure_without_the_key(
    site: WebSite,
) -> None:
    settings = SearchSettings(backend="brave", url=site.base_url, api_key="wrong-key-123")
    with pytest.raises(SearchFailed, match="HTTP 401") as failure:
        await search_backend(settings).search("x", 3)
    assert "wrong-key-123" not in str(failure.value)


async def test_a_large_json_page_is_laid_out_off_the_event_loop() -> None:
    # Laying out 8 MB of small objects takes the better part of a second: on the loop, every
    # tenant's requests waited for it.
    body = json.dumps([{}] * 2_000_000).encode()
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async with served_page(body) as url:
        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        page = await fetcher(max_bytes=len(body)).fetch(url)
        took = time.monotonic() - started
        ticker.cancel()
    assert page.text.startswith("[\n  {}")
    assert max(gaps) < max(0.3, took / 2), (max(gaps), took)


async def test_json_nested_past_the_parsers_depth_comes_back_as_it_is() -> None:
    body = b"[" * 200_000
    async with served_page(body) as url:
        page = await fetcher().fetch(url)
    assert page.text == body.decode()


async def test_hostile_html_pages_leave_the_shared_threads_free() -> None:
    # trafilatura spends seconds on a page of nothing but links, and runs on after its fetch
    # gave up: eight of them held every thread of the loop's default pool, which uploads,
    # workspace snapshots and lookups of every tenant wait for.
    body = b"<html><body>" + b"<p>word <a href='/x'>link</a></p>" * 20_000
    answered = 0
    all_answered = asyncio.Event()

    def sent() -> None:
        nonlocal answered
        answered += 1
        if answered == 8:
            all_answered.set()

    async with served_page(body, "text/html", sent) as url:

        async def hostile() -> None:
            with pytest.raises(FetchFailed, match="did not answer"):
                await fetcher(timeout_seconds=0.5).fetch(url)

        attack = [asyncio.create_task(hostile()) for _ in range(8)]
        await asyncio.wait_for(all_answered.wait(), 30)  # every page was sent whole
        await asyncio.sleep(0.05)  # and read by its fetch (a few ms on loopback)
        started = time.monotonic()
        await asyncio.to_thread(lambda: None)  # another tenant's work on the default pool
        waited = time.monotonic() - started
        await asyncio.gather(*attack)
    assert waited < 1.0, waited
