"""OpenAI's images API (``POST {base_url}/images/generations``): the client behind the
``generate_image`` tool, and the fallback across a profile's ``image_providers``.

Like the Chat Completions adapter it speaks the wire over the provider's own pooled aiohttp
session (``upstream_http.py``), without the SDK. One image per call. Asked for partial images,
the call is streamed: the upstream sends ``image_generation.partial_image`` events (each a
base64 image, handed to ``on_partial`` as it comes) and one ``image_generation.completed``
event with the final image. Otherwise the answer is one JSON object whose ``data[0].b64_json``
is the image.

A provider that fails (any :class:`ProviderError`: down, refusing the key, not offering the
model) gives way to the next of the chain; the last one's error is the chain's. A prompt the
upstream refuses (``invalid_request``) is not tried elsewhere: another provider would refuse
it too, and each try costs.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hermes_core import json_codec
from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.providers._configured import ConfiguredProvider
from hermes_core.providers._wire_errors import (
    error_from_status,
    error_from_stream_frame,
    unreadable_response,
)
from hermes_core.providers.chat_completions import OPENAI_BASE_URL, USER_AGENT
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.images import sniff_image_type
from hermes_core.providers.upstream_http import SseData, UpstreamSession, transport_errors

log = logging.getLogger(__name__)

OUTPUT_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
"""``output_format`` → the image's MIME type."""
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The most of an images answer (JSON or a stream, base64 images in it) read into memory."""
MAX_ERROR_BYTES = 64 * 1024
MAX_PARTIAL_IMAGES = 3
"""As OpenAI: 0-3 partial images per image."""

OnPartial = Callable[[int, str], None]
"""Called with each partial image's 0-based index and its base64 data, as it arrives."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageRequest:
    """One image to generate. None leaves a setting to the upstream's default."""

    prompt: str
    size: str | None = None
    """``WIDTHxHEIGHT`` or ``auto``."""
    quality: str | None = None
    """``low`` / ``medium`` / ``high`` / ``auto`` (``standard`` / ``hd`` for DALL·E)."""
    output_format: str | None = None
    """``png`` / ``jpeg`` / ``webp``."""
    background: str | None = None
    """``transparent`` / ``opaque`` / ``auto``."""
    partial_images: int = 0
    """Partial images to stream before the final one (0: none, the call is not streamed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneratedImage:
    data: bytes
    mime: str
    provider: str
    model: str
    revised_prompt: str | None = None

    @property
    def extension(self) -> str:
        return {"image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}.get(self.mime, "png")


class ImagesProvider(ConfiguredProvider):
    """One provider's images endpoint; its configured ``model`` is the image model."""

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        base_url = config.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        self._url = base_url.rstrip("/") + "/images/generations"
        self._http = UpstreamSession(timeout=config.timeout)
        self._key_changed()

    def _key_changed(self) -> None:
        self._headers = {
            "authorization": f"Bearer {self._key}",
            "content-type": "application/json",
            "accept": "application/json",
            "user-agent": USER_AGENT,
        }
        self._stream_headers = {**self._headers, "accept": "text/event-stream"}

    def body(self, request: ImageRequest) -> dict[str, Any]:
        """The request body: only the settings given (an upstream rejects what its model
        does not take, e.g. ``output_format`` for DALL·E)."""
        body: dict[str, Any] = {"model": self.model, "prompt": request.prompt, "n": 1}
        settings = {
            "size": request.size,
            "quality": request.quality,
            "output_format": request.output_format,
            "background": request.background,
        }
        body.update({key: value for key, value in settings.items() if value is not None})
        if self.model.startswith("dall-e"):
            body["response_format"] = "b64_json"  # DALL·E answers with a URL otherwise
        if request.partial_images:
            body["stream"] = True
            body["partial_images"] = request.partial_images
        return body

    async def generate(
        self, request: ImageRequest, on_partial: OnPartial | None = None
    ) -> GeneratedImage:
        streamed = request.partial_images > 0
        payload = json_codec.dumps(self.body(request))
        headers = self._stream_headers if streamed else self._headers
        try:
            return await self._post(request, payload, headers, streamed, on_partial)
        except ProviderError as error:
            if error.kind not in (ErrorKind.AUTH, ErrorKind.FORBIDDEN):
                raise
            if not await self.refresh_credentials():
                raise
            headers = self._stream_headers if streamed else self._headers
            return await self._post(request, payload, headers, streamed, on_partial)

    async def _post(
        self,
        request: ImageRequest,
        payload: bytes,
        headers: dict[str, str],
        streamed: bool,
        on_partial: OnPartial | None,
    ) -> GeneratedImage:
        with transport_errors(self.name):
            async with self._http.post(self._url, payload, headers) as response:
                if response.status >= 400:
                    body = await self._capped(response, MAX_ERROR_BYTES, truncate=True)
                    raise error_from_status(self.name, response.status, response.headers, body)
                if not streamed:
                    return self._image_of_reply(
                        await self._capped(response, MAX_ANSWER_BYTES), request
                    )
                frames = SseData()
                seen = 0
                async for piece in response.content.iter_any():
                    seen += len(piece)
                    if seen > MAX_ANSWER_BYTES:
                        raise self._too_large()
                    for data in frames.feed(piece):
                        image = self._stream_frame(data, request, on_partial)
                        if image is not None:
                            # Read on to the end: a fully read answer keeps its connection.
                            await self._capped(response, MAX_ANSWER_BYTES)
                            return image
        raise unreadable_response(self.name, "the image stream ended without an image")

    async def _capped(self, response: Any, limit: int, *, truncate: bool = False) -> bytes:
        """The rest of ``response``'s body, at most ``limit`` bytes: an upstream sending more
        is refused (``truncate``: cut, for an error's text) instead of filling our memory."""
        parts: list[bytes] = []
        seen = 0
        async for piece in response.content.iter_any():
            seen += len(piece)
            if seen > limit:
                if truncate:
                    parts.append(piece[: max(0, limit - (seen - len(piece)))])
                    break
                raise self._too_large()
            parts.append(piece)
        return b"".join(parts)

    def _too_large(self) -> ProviderError:
        return unreadable_response(
            self.name, f"the images answer is larger than {MAX_ANSWER_BYTES} bytes"
        )

    def _stream_frame(
        self, data: bytes, request: ImageRequest, on_partial: OnPartial | None
    ) -> GeneratedImage | None:
        if data == b"[DONE]":
            return None
        frame = self._json(data, "a stream frame is not JSON")
        if frame.get("error"):
            raise error_from_stream_frame(self.name, frame)
        kind = frame.get("type")
        if kind == "image_generation.partial_image":
            if on_partial is not None and isinstance(frame.get("b64_json"), str):
                on_partial(int(frame.get("partial_image_index") or 0), frame["b64_json"])
            return None
        if kind == "image_generation.completed":
            return self._image(frame.get("b64_json"), request, frame.get("revised_prompt"))
        return None

    def _image_of_reply(self, body: bytes, request: ImageRequest) -> GeneratedImage:
        reply = self._json(body, "the reply is not JSON")
        if reply.get("error"):
            raise error_from_stream_frame(self.name, reply)
        data = reply.get("data")
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
        return self._image(first.get("b64_json"), request, first.get("revised_prompt"))

    def _image(self, encoded: object, request: ImageRequest, revised: object) -> GeneratedImage:
        if not isinstance(encoded, str):
            raise unreadable_response(self.name, "the answer holds no b64_json image")
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise unreadable_response(self.name, "the image is not valid base64") from None
        mime = sniff_image_type(data) or OUTPUT_FORMATS.get(request.output_format or "png")
        return GeneratedImage(
            data=data,
            mime=mime or "image/png",
            provider=self.name,
            model=self.model,
            revised_prompt=revised if isinstance(revised, str) else None,
        )

    def _json(self, raw: bytes, what: str) -> dict[str, Any]:
        try:
            value = json_codec.loads(raw)
        except ValueError as exc:
            raise unreadable_response(self.name, what) from exc
        if not isinstance(value, dict):
            raise unreadable_response(self.name, what)
        return value

    async def aclose(self) -> None:
        await self._http.aclose()


class ImageChain:
    """The profile's image providers, tried in order until one gives an image."""

    def __init__(self, providers: Sequence[ImagesProvider]) -> None:
        if not providers:
            raise ValueError("an image chain needs at least one provider")
        self.providers = list(providers)

    async def generate(
        self, request: ImageRequest, on_partial: OnPartial | None = None
    ) -> GeneratedImage:
        last: ProviderError | None = None
        for provider in self.providers:
            try:
                return await provider.generate(request, on_partial)
            except ProviderError as error:
                if error.kind is ErrorKind.INVALID_REQUEST:
                    raise  # the prompt or a setting: any provider would refuse it
                log.warning("images provider %s failed (%s): trying the next", provider.name, error)
                last = error
        assert last is not None
        raise last

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()
