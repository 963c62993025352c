"""The one TLS context the SDK-built adapters' HTTP clients verify upstreams with.

httpx gives each new client a TLS context of its own and reads the whole CA bundle into it
(~25 ms of CPU). The server builds an SDK client for every Anthropic Messages or Responses
provider, again on each reload of the configuration, and the tests build hundreds of them; a
context may be shared by any number of clients. It is httpx's own default (certifi's bundle,
or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), made on first use, once per process.
"""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def upstream_tls_context() -> ssl.SSLContext:
    return httpx2.create_ssl_context()
