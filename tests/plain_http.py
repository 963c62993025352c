"""The TLS context the tests' HTTP clients are given, which none of them uses.

They speak plain HTTP to servers on this machine, yet httpx (and the SDKs built on it) makes
each new client a verifying TLS context of its own, reading certifi's CA bundle: ~20 ms of CPU
per client, and a run makes hundreds. Given this one, a client makes none. It trusts no
certificate at all, so a client that did speak TLS would fail, not pass unverified.
"""

from __future__ import annotations

import ssl

TLS_UNUSED = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
