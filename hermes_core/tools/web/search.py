"""Web search backends: one request shape and one answer shape each, as their docs give them.

- **SearXNG** (self-hosted metasearch): ``GET {url}/search?q=…&format=json`` → ``results[]``
  with ``title``, ``url``, ``content``. The instance must enable the ``json`` format.
- **Brave Search API**: ``GET {url}/res/v1/web/search?q=…&count=N`` with the key in
  ``X-Subscription-Token`` → ``web.results[]`` with ``title``, ``url``, ``description``.
- **Tavily**: ``POST {url}/search`` ``{"query", "max_results"}`` with ``Authorization: Bearer``
  → ``results[]`` with ``title``, ``url``, ``content``.

The backend's URL is the operator's, so it is not held to the tools' address policy (a
SearXNG on the intranet is the usual setup); what it returns is only text for the model.
"""

from __future__ import annotations

import html
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from hermes_core.events import Source
from hermes_core.imports_off_loop import import_off_loop

if TYPE_CHECKING:
    import aiohttp

SearchBackendName = Literal["searxng", "brave", "tavily"]
_TAGS = re.compile(r"<[^>]+>")


class SearchFailed(Exception):
    """The backend could not answer; the message says why (never the key)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSettings:
    backend: SearchBackendName
    url: str | None = None
    """The backend's base URL; the vendor's public API for Brave and Tavily when None."""
    api_key: str | None = None
    timeout_seconds: float = 15.0


class SearchBackend(ABC):
    name: ClassVar[str]
    default_url: ClassVar[str | None] = None

    def __init__(self, settings: SearchSettings) -> None:
        url = settings.url or self.default_url
        if not url:
            raise ValueError(f"the {self.name} search backend needs a url")
        self.url = url.rstrip("/")
        self.api_key = settings.api_key
        self.timeout_seconds = settings.timeout_seconds

    async def search(self, query: str, count: int) -> list[Source]:
        await import_off_loop("aiohttp")  # a server starts without it
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout_seconds)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                answer = await self._request(session, query, count)
        except TimeoutError:
            raise SearchFailed(f"{self.name} search did not answer in time") from None
        except aiohttp.ClientResponseError as error:
            raise SearchFailed(f"{self.name} search answered HTTP {error.status}") from None
        except (aiohttp.ClientError, ValueError) as error:
            raise SearchFailed(f"{self.name} search failed: {type(error).__name__}") from None
        return [s for s in self._results(answer) if s.url][:count]

    @abstractmethod
    async def _request(
        self, session: aiohttp.ClientSession, query: str, count: int
    ) -> Mapping[str, Any]: ...

    @abstractmethod
    def _results(self, answer: Mapping[str, Any]) -> list[Source]: ...


class SearxngSearch(SearchBackend):
    name = "searxng"

    async def _request(
        self, session: aiohttp.ClientSession, query: str, count: int
    ) -> Mapping[str, Any]:
        params = {"q": query, "format": "json"}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        async with session.get(
            f"{self.url}/search", params=params, headers=headers, raise_for_status=True
        ) as response:
            return _mapping(await response.json(content_type=None))

    def _results(self, answer: Mapping[str, Any]) -> list[Source]:
        return [_source(r, "title", "url", "content") for r in _items(answer.get("results"))]


class BraveSearch(SearchBackend):
    name = "brave"
    default_url = "https://api.search.brave.com"

    async def _request(
        self, session: aiohttp.ClientSession, query: str, count: int
    ) -> Mapping[str, Any]:
        headers = {"Accept": "application/json", "X-Subscription-Token": self.api_key or ""}
        async with session.get(
            f"{self.url}/res/v1/web/search",
            params={"q": query, "count": str(min(count, 20))},
            headers=headers,
            raise_for_status=True,
        ) as response:
            return _mapping(await response.json(content_type=None))

    def _results(self, answer: Mapping[str, Any]) -> list[Source]:
        web = _mapping(answer.get("web"))
        return [_source(r, "title", "url", "description") for r in _items(web.get("results"))]


class TavilySearch(SearchBackend):
    name = "tavily"
    default_url = "https://api.tavily.com"

    async def _request(
        self, session: aiohttp.ClientSession, query: str, count: int
    ) -> Mapping[str, Any]:
        async with session.post(
            f"{self.url}/search",
            json={"query": query, "max_results": min(count, 20)},
            headers={"Authorization": f"Bearer {self.api_key or ''}"},
            raise_for_status=True,
        ) as response:
            return _mapping(await response.json(content_type=None))

    def _results(self, answer: Mapping[str, Any]) -> list[Source]:
        return [_source(r, "title", "url", "content") for r in _items(answer.get("results"))]


BACKENDS: dict[str, type[SearchBackend]] = {
    backend.name: backend for backend in (SearxngSearch, BraveSearch, TavilySearch)
}


def search_backend(settings: SearchSettings) -> SearchBackend:
    return BACKENDS[settings.backend](settings)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _source(item: Mapping[str, Any], title: str, url: str, snippet: str) -> Source:
    def text(key: str) -> str:
        value = item.get(key)
        # Brave marks matches with <strong>; snippets reach the model as plain text.
        return html.unescape(_TAGS.sub("", value)).strip() if isinstance(value, str) else ""

    return Source(url=text(url), title=text(title), snippet=text(snippet))
