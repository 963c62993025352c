"""Where a provider's API key comes from, and reading it again when it stops working.

A key may be given literally, or come from an environment variable, a file or a command. The
more dynamic a source, the likelier it holds a rotated key, so they are consulted in the order
command, file, environment, literal. Keys are read when a provider is built and once more after
a 401/403 — never on the hot path of a healthy call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import subprocess
from pathlib import Path

from hermes_core.providers.config import ProviderConfig

log = logging.getLogger(__name__)
COMMAND_TIMEOUT = 15.0


def read_key(config: ProviderConfig) -> str | None:
    """The key as it is now. Blocking (it may run a command): call from a worker thread."""
    if config.api_key_command:
        key = _run_key_command(config)
        if key:
            return key
    if config.api_key_file:
        try:
            key = Path(config.api_key_file).read_text().strip()
        except OSError as exc:
            log.warning("provider %s: cannot read its key file (%s)", config.name, exc.strerror)
        else:
            if key:
                return key
    if config.api_key_env:
        key = os.environ.get(config.api_key_env, "").strip()
        if key:
            return key
    return config.api_key.get_secret_value() if config.api_key else None


async def reread_key(config: ProviderConfig) -> str | None:
    """:func:`read_key` off the event loop."""
    return await asyncio.to_thread(read_key, config)


def _run_key_command(config: ProviderConfig) -> str | None:
    assert config.api_key_command is not None
    try:
        completed = subprocess.run(
            shlex.split(config.api_key_command),
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        # The command line may embed secrets: name the provider, never the command.
        log.warning("provider %s: key command failed (%s)", config.name, type(exc).__name__)
        return None
    if completed.returncode != 0:
        log.warning("provider %s: key command exited %s", config.name, completed.returncode)
        return None
    return completed.stdout.decode().strip() or None
