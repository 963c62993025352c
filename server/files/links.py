"""Names for workspace files that leave the server: container and file ids, signed links.

- **Container id** ``cntr_<32 hex>``: the workspace directory's name (a digest of the
  conversation's name) XOR a digest of its owner. It is resolved only under the caller's own
  owner directory, so another key's container id names a directory that does not exist (a
  404), and the same conversation name under two keys gives two ids.
- **File id** ``cfile_<base64url of the relative path>``: reversible, so no index is kept;
  the path is confined to the workspace on every use, as the workspace routes' paths are.
- **Signed link** ``/v1/workspaces/signed/<token>/<filename>``: the token is
  ``<payload>.<signature>``, the payload (base64url JSON) naming the workspace directory
  (owner and conversation digests), the path and the expiry; the signature an HMAC-SHA256
  under the server's link secret. The secret is made on the first start in the data
  directory, so replicas sharing it accept each other's links. The token is the only
  authority the link route asks for: no API key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from server.files.workspaces import conversation_workspace
from server.http.auth import SIGNED_PREFIX

DEFAULT_LINK_SECONDS = 7 * 24 * 3600
_SECRET_FILE = "file-link-secret"
_CONTEXT = b"hermes-file-link-v1\n"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """Strictly: a character outside the alphabet is an error, not skipped."""
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def _owner_mask(owner: str) -> int:
    digest = hashlib.sha256(b"hermes-container\0" + owner.encode("utf-8", "surrogatepass"))
    return int(digest.hexdigest()[:32], 16)


def container_id(owner: str, workspace: Path) -> str:
    """The container id of ``owner``'s conversation workspace ``workspace``."""
    return f"cntr_{int(workspace.name, 16) ^ _owner_mask(owner):032x}"


def container_root(workspaces_dir: Path, owner: str, container: str) -> Path | None:
    """The workspace directory ``container`` names for ``owner`` (None: not an id of ours)."""
    hexed = container.removeprefix("cntr_")
    if hexed == container or len(hexed) != 32:
        return None
    try:
        value = int(hexed, 16)
    except ValueError:
        return None
    owner_dir = conversation_workspace(workspaces_dir, owner, "").parent
    return owner_dir / f"{value ^ _owner_mask(owner):032x}"


def file_id(path: str) -> str:
    return f"cfile_{_b64(path.encode('utf-8', 'surrogateescape'))}"


def path_of(file: str) -> str | None:
    """The relative path a file id names (None: not a file id of ours)."""
    encoded = file.removeprefix("cfile_")
    if encoded == file or not encoded:
        return None
    try:
        path = _unb64(encoded).decode("utf-8", "surrogateescape")
    except (ValueError, binascii.Error):
        return None
    return path or None


class LinkRefused(Exception):
    """A signed link that is not (or no longer) good: ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class LinkTarget:
    """What a good token grants: one path of one workspace directory."""

    workspace: str
    """``<owner digest>/<conversation digest>``, relative to the workspaces directory."""
    path: str


class LinkSigner:
    """Signs and checks file links with the secret kept in ``secret_path``."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def from_file(cls, secret_path: Path) -> LinkSigner:
        """The secret in ``secret_path``, made there first if there is none. Several
        replicas may start at once: the secret is written whole to a temporary file and
        linked into place, and whoever loses the race reads the winner's."""
        try:
            return cls(_read_secret(secret_path))
        except FileNotFoundError:
            pass
        secret_path.parent.mkdir(parents=True, exist_ok=True)
        # A name of its own (threads share a pid), and never an existing file: a file once
        # linked into place is never opened for writing again.
        temporary = secret_path.with_name(f".{secret_path.name}.{secrets.token_hex(8)}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))
        try:
            os.link(temporary, secret_path)
        except FileExistsError:
            pass
        finally:
            temporary.unlink(missing_ok=True)
        return cls(_read_secret(secret_path))

    def sign(self, target: LinkTarget, expires_at: int) -> str:
        payload = _b64(json.dumps([target.workspace, target.path, expires_at]).encode())
        return f"{payload}.{self._signature(payload)}"

    def check(self, token: str, *, now: float | None = None) -> LinkTarget:
        """What ``token`` grants; :class:`LinkRefused` if it is forged or expired."""
        payload, dot, signature = token.partition(".")
        # Compared as text: a changed padding bit of the base64 must not pass either.
        if not (dot and token.isascii()) or not hmac.compare_digest(
            signature, self._signature(payload)
        ):
            raise LinkRefused("invalid_link", "This link is not valid.")
        workspace, path, expires_at = json.loads(_unb64(payload))
        if (time.time() if now is None else now) >= expires_at:
            raise LinkRefused("link_expired", "This link has expired.")
        return LinkTarget(str(workspace), str(path))

    def _signature(self, payload: str) -> str:
        mac = hmac.new(self._secret, _CONTEXT + payload.encode("ascii"), "sha256")
        return _b64(mac.digest())


def _read_secret(path: Path) -> bytes:
    text = path.read_text().strip()
    if len(text) < 32:
        raise ValueError(f"{path} holds no usable file-link secret")
    return text.encode("ascii")


def secret_path(data_dir: Path) -> Path:
    return data_dir / _SECRET_FILE


@dataclass(frozen=True, slots=True)
class FileLinkSettings:
    """How this server names files for browsers (``server.public_url``,
    ``server.file_link_seconds``) and where its link secret lives."""

    data_dir: Path | None = None
    """Where the secret is kept; None: no signed links (library use, some tests)."""
    public_url: str | None = None
    """The address browsers reach the server at; None: each request's own base URL."""
    link_seconds: int = DEFAULT_LINK_SECONDS


class FileLinks:
    """The server's file links: its settings, and its signer once first needed."""

    def __init__(self, settings: FileLinkSettings | None = None) -> None:
        self.settings = settings or FileLinkSettings()
        self._signer: LinkSigner | None = None

    def signer(self) -> LinkSigner | None:
        """The signer (reading or making the secret on first use); None without a data dir.
        Blocking file I/O, once per process: call it off the event loop the first time."""
        if self._signer is None and self.settings.data_dir is not None:
            self._signer = LinkSigner.from_file(secret_path(self.settings.data_dir))
        return self._signer

    @property
    def signer_ready(self) -> bool:
        """The signer is loaded (or never will be): :meth:`signer` does no I/O."""
        return self._signer is not None or self.settings.data_dir is None

    def base_url(self, request_base: str) -> str:
        """Where browsers reach the server: ``public_url``, else the request's own base."""
        return (self.settings.public_url or request_base).rstrip("/")


def signed_url(base: str, token: str, path: str) -> str:
    """The link to a file: the token, then the file's name (for the browser's sake)."""
    return f"{base}{SIGNED_PREFIX}{token}/{quote(path.rsplit('/', 1)[-1])}"
