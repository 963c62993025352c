"""The domains one run's web tools keep to, when its request names some (the Responses
``web_search`` tool's ``filters.allowed_domains``).

It is the request's, not the profile's, so it travels with the run rather than in the tools'
options: the server sets it while it starts the run, and the run's task (and every task and
worker thread it starts) inherits it. Unset, the tools go wherever the address policy lets
them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from urllib.parse import urlsplit

_ALLOWED: ContextVar[tuple[str, ...] | None] = ContextVar("hermes_web_domains", default=None)


@contextmanager
def only_domains(domains: Sequence[str] | None) -> Iterator[None]:
    """Runs started inside keep their web tools to ``domains`` (None: no restriction)."""
    token = _ALLOWED.set(tuple(_normal(d) for d in domains) if domains else None)
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def allowed_domains() -> tuple[str, ...] | None:
    """The domains the current run keeps to (None: any the address policy allows)."""
    return _ALLOWED.get()


def within(url: str, domains: Sequence[str] | None) -> bool:
    """Whether ``url``'s host is one of ``domains`` or under one (``docs.python.org`` is
    within ``python.org``)."""
    if domains is None:
        return True
    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    return any(host == d or host.endswith("." + d) for d in domains)


def _normal(domain: str) -> str:
    """A domain as given (``https://Example.com/``, ``www.example.com``) → its host name."""
    text = domain.strip().lower()
    if "://" in text:
        text = urlsplit(text).hostname or ""
    return text.split("/")[0].rstrip(".")
