"""Standard Webhooks signatures: ``webhook-signature: v1,<base64 HMAC-SHA256>`` over
``"{webhook-id}.{webhook-timestamp}.{body}"``, keyed with the bytes a ``whsec_<base64>``
secret encodes — what the OpenAI SDKs' ``client.webhooks.unwrap`` checks."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

SECRET_PREFIX = "whsec_"


def secret_key(secret: str) -> bytes:
    """The signing key a ``whsec_…`` secret holds; ``ValueError`` when it holds none."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("a webhook secret starts with whsec_ (then base64)")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret is whsec_ followed by base64") from None
    if len(key) < 16:
        raise ValueError("a webhook secret holds at least 16 bytes (24 base64 characters)")
    return key


def signature(secret: str, webhook_id: str, timestamp: int, body: str) -> str:
    """The ``webhook-signature`` header's value for one attempt."""
    signed = f"{webhook_id}.{timestamp}.{body}".encode()
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secret: str, webhook_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The three headers every attempt carries (the id the same each time, the timestamp
    and so the signature new)."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, webhook_id, timestamp, body),
        "content-type": "application/json",
    }
