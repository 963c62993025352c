"""Fetching one web page for the model: readable Markdown of HTML, JSON and text as they are.

Every hop goes through the :mod:`~hermes_core.tools.web.guard` (redirects are followed here,
one at a time, so each target is checked before it is requested), and every fetch is capped in
time, size and redirects. The main content of an HTML page is extracted with trafilatura (the
well-kept extraction library) in a child process (``page_readers.py``), never in the server.
"""

from __future__ import annotations

import asyncio
import codecs
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from hermes_core.imports_off_loop import import_off_loop
from hermes_core.tools.web.domains import allowed_domains, within
from hermes_core.tools.web.guard import (
    AddressPolicy,
    AddressRefused,
    Lookup,
    system_lookup,
)
from hermes_core.tools.web.page_readers import PageUnreadable, read_page

if TYPE_CHECKING:
    import aiohttp

USER_AGENT = "hermes-server/0.1 (+https://github.com/hermes-server; web_fetch tool)"
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
JSON_TYPES = frozenset({"application/json", "application/ld+json"})
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchLimits:
    max_bytes: int = 2 * 1024 * 1024
    """Bytes of a response body read at most; the rest is not downloaded."""
    timeout_seconds: float = 20.0
    """For the whole fetch, redirects included."""
    max_redirects: int = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """A fetched page, as the model reads it."""

    url: str
    """Where the content came from (after redirects)."""
    status: int
    content_type: str
    title: str
    text: str
    """Markdown of an HTML page; JSON laid out; text as it is; or a note on what it was."""
    truncated: bool = False
    """The body was longer than the size cap: the text is of its beginning."""
    readable: bool = True
    """False for content the model cannot read (an image, a PDF, an archive…)."""


class FetchFailed(Exception):
    """The page could not be fetched; the message says why, for the model."""


class WebFetcher:
    """Fetches pages under an address policy and limits (one per toolset, shared by runs)."""

    def __init__(
        self,
        policy: AddressPolicy,
        limits: FetchLimits | None = None,
        *,
        lookup: Lookup = system_lookup,
    ) -> None:
        self.policy = policy
        self.limits = limits or FetchLimits()
        self._lookup = lookup

    async def fetch(self, url: str) -> Page:
        try:
            async with asyncio.timeout(self.limits.timeout_seconds):
                return await self._fetch(url)
        except TimeoutError:
            raise FetchFailed(
                f"{url} did not answer within {self.limits.timeout_seconds:g} seconds"
            ) from None

    async def _fetch(self, url: str) -> Page:
        await import_off_loop("aiohttp")  # a server starts without it
        import aiohttp

        from hermes_core.tools.web.guarded_resolver import GuardedResolver

        # A fresh connector per fetch: no DNS cache, no pooled connection to an address that a
        # different policy decision (or an earlier answer) produced.
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(self.policy, self._lookup), use_dns_cache=False
        )
        async with aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": USER_AGENT, "Accept": "text/html, application/json, */*"},
            trust_env=False,  # no proxy from the environment: the check must see the target
        ) as session:
            for _hop in range(self.limits.max_redirects + 1):
                self.policy.check_url(url)
                if not within(url, allowed_domains()):  # a redirect away from them included
                    raise FetchFailed(f"{url} is outside the domains this request allows")
                try:
                    async with session.get(url, allow_redirects=False) as response:
                        if response.status in REDIRECTS and "Location" in response.headers:
                            url = urljoin(str(response.url), response.headers["Location"])
                            continue
                        return await self._page(url, response)
                except aiohttp.ClientConnectorError as error:
                    if isinstance(error.os_error, AddressRefused):
                        raise error.os_error from None
                    raise FetchFailed(f"cannot connect to {url}: {error.os_error}") from None
                except aiohttp.InvalidURL:
                    raise FetchFailed(f"not a valid URL: {url}") from None
                except aiohttp.ClientError as error:
                    raise FetchFailed(f"fetching {url} failed: {error}") from None
        raise FetchFailed(f"{url}: more than {self.limits.max_redirects} redirects")

    async def _page(self, url: str, response: aiohttp.ClientResponse) -> Page:
        content_type = response.content_type.lower()
        body, truncated = await _read_capped(response, self.limits.max_bytes)
        charset = _known_charset(response.charset)

        def page(title: str, text: str) -> Page:
            return Page(
                url=url,
                status=response.status,
                content_type=content_type,
                title=title,
                text=text,
                truncated=truncated,
            )

        if content_type in HTML_TYPES:
            try:
                return page(*await read_page(body, url, charset))
            except PageUnreadable as unreadable:
                raise FetchFailed(f"{url} could not be read: {unreadable}") from None
        if content_type in JSON_TYPES or content_type.endswith("+json"):
            # Laying out megabytes of JSON takes most of a second: not on the loop every
            # tenant's requests run on.
            return page("", await asyncio.to_thread(_json_text, body, charset))
        if content_type.startswith("text/") or content_type in ("application/xml", ""):
            return page("", body.decode(charset, errors="replace"))
        size = response.headers.get("Content-Length") or f"at least {len(body)}"
        note = f"[{content_type} content, {size} bytes: not text, so not shown]"
        return Page(
            url=url,
            status=response.status,
            content_type=content_type,
            title="",
            text=note,
            readable=False,
        )


def _known_charset(name: str | None) -> str:
    """The page's declared charset when Python knows it as a text encoding; UTF-8 otherwise
    (a page may declare anything, "base64" and "undefined" included, which are codecs of
    Python's that no text decodes with)."""
    if name:
        try:
            known = codecs.lookup(name).name
            b"x".decode(known, errors="replace")
        except (LookupError, UnicodeError):
            return "utf-8"
        return known
    return "utf-8"


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit], True
    return b"".join(chunks), False


def _json_text(body: bytes, charset: str) -> str:
    text = body.decode(charset, errors="replace")
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        # Truncated, not JSON after all, or nested deeper than the parser goes: as it came.
        return text
