"""A request's own ``mcp`` tool is checked before the server connects anywhere: a header HTTP
cannot carry is a 400 at once (sent, it failed the connection: a 424 after the connect
timeout), and its value is never echoed in the error (it may be a credential)."""

from __future__ import annotations

from typing import Any

import pytest

from server.errors import APIError
from server.protocol.remote_mcp import remote_mcp_tools


def _tool(**fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "docs", "server_url": "http://mcp.test/mcp", **fields}


@pytest.mark.parametrize(
    "fields",
    [
        {"headers": {"Authorization": "Bearer s\u00e9cret"}},
        {"headers": {"X-Token": "abc\r\nX-Injected: 1"}},
        {"headers": {"Bad Name": "x"}},
        {"headers": {"": "x"}},
        {"authorization": "tok\u2026"},
        {"authorization": "tok\nX-Injected: 1"},
    ],
    ids=[
        "non-ascii-value",
        "line-break",
        "space-in-name",
        "empty-name",
        "auth-non-ascii",
        "auth-line-break",
    ],
)
def test_a_header_http_cannot_carry_is_a_400_that_does_not_echo_it(fields: dict[str, Any]) -> None:
    with pytest.raises(APIError) as refused:
        remote_mcp_tools([_tool(**fields)])

    assert refused.value.status == 400
    assert refused.value.param == "tools"
    for secret in ("s\u00e9cret", "tok", "abc", "Injected"):
        assert secret not in str(refused.value)


def test_ordinary_headers_and_an_authorization_are_taken() -> None:
    (tool,) = remote_mcp_tools(
        [
            _tool(
                headers={"X-Api-Key": "k-123_~!", "Accept": "text/event-stream\t"},
                authorization="abc.def",
            )
        ]
    )

    assert tool.headers == {
        "X-Api-Key": "k-123_~!",
        "Accept": "text/event-stream\t",
        "Authorization": "Bearer abc.def",
    }
