"""Reloading the configuration file without a restart: on SIGHUP, or when the file changes.

What a reload changes: API keys, profiles (their providers, toolsets, MCP servers), the run and
cron limits, budgets, prices, retention, how often budgets are read again, the web settings, the
webhook endpoints (deliveries already kept for an endpoint a reload removed fail; those for one it
kept go on), and the few ``server`` settings read as each request or turn starts
(:data:`RELOADED_SERVER_SETTINGS`). Runs in progress finish on the profile they started with; its
provider clients and MCP connections, and the egress proxies of sandbox network policies no
profile has any more, are closed once those runs have ended. A new configuration that does not
load (invalid YAML, a failed check, keys removed from a server that is not loopback-only, no
upstream on a server that did not start with the built-in simulator) is refused with a log line
naming the fault, and the running one stays. Every other ``server`` setting belongs to the
process (its socket, database, directories, HTTP limits, drain): a reload that changes one says
so in the log and keeps the running value, also in what it builds from the new file.

``hermes_config_version_info{version}`` (the file's hash) and a log line say which
configuration is live. Environment variables are read at start and win over the file: each
reload names the settings they override (never their values), and a reload whose edits are all
to such settings says that no setting changed in effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
import threading
from collections.abc import Mapping, Sequence
from itertools import chain
from pathlib import Path

from hermes_core.tools.egress.registry import close_unused_egress_proxies
from hermes_core.tools.web.guard import AddressPolicy
from server.bootstrap import build_profiles, keyring_of, webhook_targets
from server.config import (
    CONFIG_ENV,
    SIMULATOR_PROVIDER,
    ConfigError,
    HermesConfig,
    Shadowed,
    edited_shadowed,
    load,
    shadowed_summary,
)
from server.config.schema import ServerConfig
from server.profiles import Profile
from server.retention.policy import retention_policy
from server.services import Services
from server.telemetry.json_logs import mask_secrets, secrets_of

log = logging.getLogger("hermes.reload")

POLL_SECONDS = 2.0
"""How often the file's modification time is looked at."""
SETTLE_SECONDS = 0.5
"""How long a changed file must stay unchanged before it is read."""
RELOADED_SERVER_SETTINGS = frozenset(
    {
        "api_keys",
        "max_concurrent_runs",
        "max_concurrent_runs_per_key",
        "workspace_key_mb",
        "stop_on_disconnect",
        "approval_timeout_seconds",
        "session_busy",
        "session_wait_seconds",
    }
)
"""The ``server`` settings a reload applies. Every other one (the listening socket, the
database, the directories, the HTTP limits, the drain…) is the process's own and needs a
restart; a new setting is one unless it is added here with the code that applies it."""


def restart_only_settings() -> list[str]:
    """The ``server`` settings a reload leaves as the process started with them."""
    return [name for name in ServerConfig.model_fields if name not in RELOADED_SERVER_SETTINGS]


def version_of(path: Path | None) -> str:
    """The configuration's version: a hash of its file (``embedded`` without one)."""
    if path is None:
        return "embedded"
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    except OSError:
        return "unreadable"


class ConfigReloader:
    """Watches one configuration file for one running server."""

    def __init__(
        self,
        services: Services,
        config: HermesConfig,
        path: Path | None,
        environ: Mapping[str, str],
        *,
        shadowed: Sequence[Shadowed] = (),
        given_as: Mapping[str, str] | None = None,
    ) -> None:
        self.services = services
        self.config = config
        self.path = path
        self.environ = dict(environ)
        self.shadowed = tuple(shadowed)
        """The file's values the environment overrides in the live configuration."""
        self.given_as = dict(given_as or {})
        """The command-line options ``environ`` carries as variables (``--port``)."""
        self.version = version_of(path)  # at start, before the event loop serves anyone
        self._mtime = self._modified()
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._retiring: dict[int, list[Profile]] = {}
        """Replaced profiles whose runs may still be going, by retirement (a run on one of
        them may still start commands under its egress policy)."""
        self._retirements = 0

    def start(self) -> None:
        """On the event loop: announce the live version, watch the file, take SIGHUP."""
        self.services.metrics.config_version.labels(self.version).set(1)
        log.info("config version %s live", self.version)
        if self.path is not None:
            self._spawn(self._watch())
        if threading.current_thread() is threading.main_thread():
            # Taken without a file too: SIGHUP's default action ends the process at once,
            # undrained, and `kill -HUP` is how operators (and systemd's reload) ask.
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGHUP, self._hangup)

    def _hangup(self) -> None:
        if self.path is None:
            log.warning(
                "SIGHUP: nothing to reload, the server runs without a configuration file "
                "(start it with --config FILE or %s to reload one)",
                CONFIG_ENV,
            )
            return
        self._spawn(self.reload())

    async def reload(self) -> bool:
        """Load the file again and apply it; False (and the old one stays) if it is invalid."""
        async with self._lock:
            self._mtime = await asyncio.to_thread(self._modified)
            version = await asyncio.to_thread(version_of, self.path)
            try:
                if await asyncio.to_thread(self._empty):
                    # Valid (the embedded defaults), but far likelier a file being rewritten
                    # than a wish to drop every key, profile and provider of a running server.
                    raise ConfigError(
                        ["the file is empty (restart the server to run on the embedded defaults)"]
                    )
                loaded = await asyncio.to_thread(load, self.path, self.environ)
                config = loaded.config
                self._check(config)
                config, kept = self._keeping_process_settings(config)
                config = self._with_running_simulator(config)
                # Off the loop: building a provider reads its key (a file, a key command of up
                # to 15 s), and the toolsets read skill folders and probe the sandbox.
                profiles = await asyncio.to_thread(build_profiles, config)
            except ConfigError as error:
                return self._refused("; ".join(error.problems))
            except Exception as error:  # a provider or toolset that cannot be built
                return self._refused(f"{type(error).__name__}: {error}")
            if kept:
                log.warning(
                    "config reload: needs a restart, kept as the server started: %s",
                    ", ".join(f"server.{name}" for name in kept),
                )
            edited = edited_shadowed(self.shadowed, loaded.shadowed)
            if loaded.shadowed:
                summary = shadowed_summary(loaded.shadowed, edited, self.given_as)
                log.warning("config reload: %s", summary)
            self._apply(config, profiles, version, self._effect(config, edited))
            self.shadowed = loaded.shadowed
            return True

    def _effect(self, config: HermesConfig, edited: Sequence[str]) -> str:
        """What the live line adds about ``config`` against the running one: that no setting
        changed in effect, and why when the file's edits were all overridden."""
        if config != self.config:
            return ""
        if edited:
            return (
                "; no setting changed in effect: the file's edits are to settings the "
                f"environment overrides ({', '.join(edited)})"
            )
        return "; no setting changed in effect"

    def _refused(self, why: str) -> bool:
        log.error("config reload refused, version %s stays live: %s", self.version, why)
        self.services.metrics.config_reloads.labels("refused").inc()
        return False

    def _check(self, config: HermesConfig) -> None:
        problems = []
        if not config.server.api_keys and not self.config.server.loopback_only:
            problems.append(
                "server.api_keys: would be empty, on a server not bound to loopback only "
                "(it would serve anyone)"
            )
        if config.uses_simulator and not self._runs_simulator():
            # The built-in simulator stands in for a missing upstream only in a server that
            # started with it: here every run would go nowhere and answer 502.
            problems.append(
                "providers: the file configures no upstream model (no providers and no "
                "HERMES_UPSTREAM_* / vendor key variables), and this server did not start "
                "with the built-in simulator"
            )
        if problems:
            raise ConfigError(problems)

    def _keeping_process_settings(self, config: HermesConfig) -> tuple[HermesConfig, list[str]]:
        """``config`` with the restart-only settings the process runs with, and the names of
        those it would have changed. Kept rather than taken: what is built from the new file
        (the tools' guard against this server's own port) must describe this process."""
        running = self.config.server
        kept = [
            name
            for name in restart_only_settings()
            if getattr(config.server, name) != getattr(running, name)
        ]
        if not kept:
            return config, []
        server = config.server.model_copy(update={name: getattr(running, name) for name in kept})
        return config.model_copy(update={"server": server}), kept

    def _runs_simulator(self) -> bool:
        return any(
            p.name == SIMULATOR_PROVIDER and p.base_url is not None for p in self.config.providers
        )

    def _with_running_simulator(self, config: HermesConfig) -> HermesConfig:
        """``config`` with the address of the simulator this process started, if any."""
        base = next((p.base_url for p in self.config.providers if p.name == "simulator"), None)
        return config.with_simulator_base_url(base.removesuffix("/v1")) if base else config

    def _apply(
        self, config: HermesConfig, profiles: list[Profile], version: str, effect: str = ""
    ) -> None:
        services = self.services
        mask_secrets(secrets_of(config, self.environ))  # the log never shows a new key
        old = list(services.profiles)
        running = services.runs.live_tasks()
        services.profiles = profiles
        services.watch_learning()
        services.runs.max_runs = config.server.max_concurrent_runs
        services.runs.max_runs_per_owner = config.server.max_concurrent_runs_per_key
        services.runs.max_runs_per_user = config.limits.runs_per_user
        services.max_crons_per_key = config.limits.crons_per_key
        services.stop_on_disconnect = config.server.stop_on_disconnect
        services.approvals.expiry_seconds = config.server.approval_timeout_seconds
        # One object, shared with the session service: its next turn reads the new values.
        services.session_settings.busy = config.server.session_busy
        services.session_settings.wait_seconds = config.server.session_wait_seconds
        services.remote_mcp_connect_seconds = config.web.mcp_connect_timeout_seconds
        services.budgets.reload_refresh(config.limits.budget_refresh_seconds)
        services.keyring.replace(keyring_of(config))
        services.address_policy = AddressPolicy.allowing(
            config.web.allow, own_ports=[config.server.port]
        )
        services.webhooks.targets = tuple(webhook_targets(config))
        services.retention = retention_policy(config)
        for profile in profiles:
            if profile.mcp is not None:
                profile.mcp.start()
        services.metrics.config_version.labels(self.version).set(0)
        services.metrics.config_version.labels(version).set(1)
        services.metrics.config_reloads.labels("applied").inc()
        log.warning(
            "config version %s live (was %s): %d profile(s), %d key(s)%s",
            version,
            self.version,
            len(profiles),
            len(config.server.api_keys),
            effect,
        )
        self.config, self.version = config, version
        self._spawn(self._retire(old, running))

    async def _retire(self, old: list[Profile], running: list[asyncio.Task[None]]) -> None:
        """Close what ``old`` holds once its runs have ended, then the egress proxies that
        neither the live profiles nor those of a retirement still waiting use."""
        self._retirements += 1
        key = self._retirements
        self._retiring[key] = old
        try:
            await _retire(old, running)
        finally:
            del self._retiring[key]
        in_use = [*self.services.profiles, *chain.from_iterable(self._retiring.values())]
        await close_unused_egress_proxies(p.egress for p in in_use if p.egress is not None)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            seen = await asyncio.to_thread(self._modified)
            if seen is None or seen == self._mtime:
                continue
            # A file caught while it is written may parse as a valid, shorter one (a profile
            # or key short): it is read once it has stopped changing.
            while (now := await self._modified_after_a_while()) != seen:
                seen = now
            if seen is not None:
                await self.reload()

    async def _modified_after_a_while(self) -> tuple[int, int] | None:
        await asyncio.sleep(SETTLE_SECONDS)
        return await asyncio.to_thread(self._modified)

    def _modified(self) -> tuple[int, int] | None:
        """The file's modification time and size: what changes while it is written."""
        if self.path is None:
            return None
        try:
            stat = self.path.stat()
            return stat.st_mtime_ns, stat.st_size
        except OSError:
            return None

    def _empty(self) -> bool:
        """The file holds nothing but blank lines and comments."""
        try:
            text = self.path.read_text(encoding="utf-8") if self.path is not None else "x"
        except (OSError, UnicodeDecodeError):
            return False  # load_config says what is wrong with it
        return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())

    def _spawn(self, work: object) -> None:
        assert asyncio.iscoroutine(work)
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _retire(profiles: list[Profile], running: list[asyncio.Task[None]]) -> None:
    """Close what the replaced profiles hold, once the runs that may use it have ended."""
    if running:
        await asyncio.wait(running)
    closed: set[int] = set()
    for profile in profiles:
        if profile.mcp is not None:
            await profile.mcp.stop()
        for client in profile.clients:
            if id(client) not in closed:
                closed.add(id(client))
                with contextlib.suppress(Exception):
                    await client.aclose()
