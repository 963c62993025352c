"""The ``web`` toolset: ``web_search`` (when a search backend is configured) and ``web_fetch``.

Both report what they found as :class:`~hermes_core.events.SourcesFound`, which the views turn
into citations and source chips; the model is asked to cite pages by their URL so that the
citations can point into its answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermes_core.events import Source, SourcesFound
from hermes_core.tools.registry import ApprovalCheck, Tool, ToolContext
from hermes_core.tools.web.domains import allowed_domains, within
from hermes_core.tools.web.fetch import FetchFailed, FetchLimits, Page, WebFetcher
from hermes_core.tools.web.guard import AddressPolicy, AddressRefused
from hermes_core.tools.web.search import SearchFailed, SearchSettings, search_backend

MAX_PAGE_CHARS = 40_000
"""Characters of a page the model is shown (``max_chars`` may ask for fewer)."""
CITE_HINT = "Cite pages you use by their URL, as Markdown links."


@dataclass(frozen=True, slots=True, kw_only=True)
class WebOptions:
    """How a server's web toolset is set up (``web:`` in the configuration)."""

    policy: AddressPolicy = field(default_factory=AddressPolicy)
    limits: FetchLimits = field(default_factory=FetchLimits)
    search: SearchSettings | None = None
    """No search backend: only ``web_fetch`` is offered."""


def web_tools(options: WebOptions, *, approval: str = "never") -> list[Tool]:
    fetcher = WebFetcher(options.policy, options.limits)
    tools = [_fetch_tool(fetcher, _approval(approval, "url"))]
    if options.search is not None:
        tools.append(_search_tool(options.search, _approval(approval, "query")))
    return tools


def _approval(policy: str, field: str) -> ApprovalCheck | None:
    # No web call matches the danger patterns (they are about commands): only "always" asks.
    if policy != "always":
        return None
    return lambda arguments: "this profile asks before every web request"


def _fetch_tool(fetcher: WebFetcher, approval: ApprovalCheck | None) -> Tool:
    async def web_fetch(arguments: dict[str, Any], ctx: ToolContext) -> str:
        url = arguments.get("url")
        if not isinstance(url, str) or not url.strip():
            return "Error: 'url' must be a non-empty http(s) URL."
        max_chars = arguments.get("max_chars")
        limit = max_chars if isinstance(max_chars, int) and max_chars > 0 else MAX_PAGE_CHARS
        domains = allowed_domains()
        if not within(url.strip(), domains):
            return f"Error: this request allows only pages of {', '.join(domains or ())}."
        try:
            page = await fetcher.fetch(url.strip())
        except AddressRefused as refused:
            return f"Error: {refused}"
        except FetchFailed as failed:
            return f"Error: {failed}"
        if page.readable:
            source = Source(url=page.url, title=page.title or page.url, snippet=page.text[:300])
            ctx.emit(
                SourcesFound, call_id=ctx.call_id, name="web_fetch", sources=[source], read=True
            )
        return _page_text(page, min(limit, MAX_PAGE_CHARS))

    return Tool(
        name="web_fetch",
        toolset="web",
        description=(
            "Fetch a web page by URL and read it: HTML comes back as Markdown of its main "
            "content, JSON and plain text as they are. Only public addresses can be fetched. "
            + CITE_HINT
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "An http or https URL."},
                "max_chars": {
                    "type": "integer",
                    "minimum": 1,
                    "description": f"Characters of the page to return (at most {MAX_PAGE_CHARS}).",
                },
            },
            "required": ["url"],
        },
        handler=web_fetch,
        cancellable=True,
        needs_approval=approval,
        max_result_chars=MAX_PAGE_CHARS + 1_000,
        summarize=lambda args: f"web_fetch {str(args.get('url', ''))[:100]}",
    )


def _page_text(page: Page, limit: int) -> str:
    head = [f"URL: {page.url}", f"Status: {page.status}"]
    if page.title:
        head.insert(0, f"Title: {page.title}")
    text = page.text
    cut = len(text) > limit
    if cut:
        text = text[:limit]
    notes = []
    if cut:
        notes.append(f"[cut at {limit} characters of {len(page.text)}]")
    if page.truncated:
        notes.append("[the page was larger than the download limit; this is its beginning]")
    return "\n".join([*head, "", text, *notes])


def _search_tool(settings: SearchSettings, approval: ApprovalCheck | None) -> Tool:
    backend = search_backend(settings)

    async def web_search(arguments: dict[str, Any], ctx: ToolContext) -> str:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return "Error: 'query' must be a non-empty string."
        count = arguments.get("count")
        count = count if isinstance(count, int) and 1 <= count <= 10 else 5
        domains = allowed_domains()
        try:
            # Asking for more when some will be filtered out leaves enough to answer with.
            results = await backend.search(query.strip(), count if domains is None else 20)
        except SearchFailed as failed:
            return f"Error: {failed}"
        results = [r for r in results if within(r.url, domains)][:count]
        if not results:
            return f"No results for {query!r}."
        ctx.emit(SourcesFound, call_id=ctx.call_id, name="web_search", sources=results, read=False)
        lines = [f"Results for {query!r}:"]
        for number, result in enumerate(results, 1):
            lines.append(f"{number}. {result.title or result.url}\n   {result.url}")
            if result.snippet:
                lines.append(f"   {result.snippet}")
        return "\n".join(lines)

    return Tool(
        name="web_search",
        toolset="web",
        description=(
            "Search the web. Returns titles, URLs and snippets; fetch a page with web_fetch "
            "to read it. " + CITE_HINT
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
            },
            "required": ["query"],
        },
        handler=web_search,
        cancellable=True,
        needs_approval=approval,
        summarize=lambda args: f"web_search {str(args.get('query', ''))[:100]}",
    )
