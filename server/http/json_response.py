"""``JSONResponse`` rendered by :mod:`hermes_core.json_codec` (orjson): the final answer of a
non-streamed run is the largest JSON the server writes per request."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from hermes_core import json_codec


class FastJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json_codec.dumps(content)
