"""A readable account of a configuration, for ``hermes-server check-config`` and start-up logs.

Every secret is masked — client keys, provider keys, passwords in URLs; a key command is never
shown because its command line may embed a secret. A test asserts that the literal keys of a
configuration never appear in :func:`describe`'s output.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

from hermes_core.providers.config import ProviderConfig
from hermes_core.skills.shelf import load_directory_skills
from hermes_core.tools.isolation import isolation
from hermes_core.tools.sandbox_python import environment_contents
from hermes_core.tools.sandbox_settings import SandboxPolicy
from hermes_core.tools.skills import SKILLS_TOOLSET
from hermes_core.tools.toolsets import TOOLSETS, ToolsetOptions, build_toolsets
from server.config.schema import (
    SIMULATOR_PROVIDER,
    Budget,
    HermesConfig,
    ProfileConfig,
    RetentionConfig,
    ServerConfig,
    WebConfig,
    WebhookConfig,
)
from server.webhooks.events import EVENT_TYPES

_LABEL_WIDTH = 20
_SECRET_QUERY_HINTS = ("pass", "key", "token", "secret", "auth")
_INSTRUCTIONS_PREVIEW = 60


def mask_secret(value: str) -> str:
    """``sk-…abcd`` for a long secret (enough to tell keys apart), ``***`` for a short one."""
    if len(value) < 20:
        return "***"
    return f"{value[:3]}…{value[-4:]}"


def mask_url(url: str) -> str:
    """``url`` with any password, and query values that look like credentials, masked."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "***"  # unparseable: it may be anything, show nothing
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    secret_query = any(_looks_secret(name) for name, _ in pairs)
    if password is None and not secret_query:
        # Returned as given: re-assembling would also turn "sqlite:///x" into "sqlite:/x".
        return url
    netloc = parts.netloc
    if password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
    query = urlencode(
        [(name, "***" if _looks_secret(name) else value) for name, value in pairs], safe="*"
    )
    masked = f"{parts.scheme}://{netloc}{parts.path}"
    return (
        masked + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")
    )


def _looks_secret(name: str) -> bool:
    return any(hint in name.lower() for hint in _SECRET_QUERY_HINTS)


def describe(config: HermesConfig, *, source: Path | None = None) -> str:
    """The whole configuration as it was resolved, one setting per line, secrets masked."""
    lines = [f"configuration: {source if source is not None else '(none; embedded defaults)'}"]
    if config.uses_simulator:
        lines.append(
            "upstream: none configured — the built-in simulator answers (offline demo). "
            "See docs/configuration.md to point at a real model."
        )
    lines += ["", "server", *_server_lines(config.server)]
    lines += ["", "team (end users, budgets, retention)", *_team_lines(config)]
    lines += ["", "web (the web toolset's reach)", *_web_lines(config.web)]
    lines += ["", "webhooks", *_webhook_lines(config.webhooks), "", "providers"]
    for provider in config.providers:
        lines += _provider_lines(provider)
    lines += ["", "profiles (the models of GET /v1/models)"]
    for profile in config.profiles:
        lines += _profile_lines(profile)
    return "\n".join(lines) + "\n"


def _row(label: str, value: object, *, indent: int = 2) -> str:
    # A label as wide as the column (a long path) still gets a space before its value.
    return f"{' ' * indent}{label:<{_LABEL_WIDTH - 1}} {value}"


def _team_lines(config: HermesConfig) -> list[str]:
    keys = config.server.api_keys
    limits = config.limits
    trusted = [k.principal for k in keys if k.trusted_front_end]
    admins = [k.principal for k in keys if k.admin]
    rows = [
        _row("trusted front ends", ", ".join(trusted) or "none (no key may name end users)"),
        _row("admin keys", ", ".join(admins) or "none"),
        _row("runs per end user", limits.runs_per_user),
        _row("key budget", _budget(limits.budget)),
        _row("end user budget", _budget(limits.end_user_budget)),
    ]
    if config.server.redis_url is not None:
        every = f"{limits.budget_refresh_seconds:g}"
        rows.append(_row("budget refresh", f"the ledger every {every} s, while runs are held"))
    for key in keys:
        if key.budget is not None or key.end_user_budget is not None:
            own = f"{_budget(key.budget or limits.budget)}; each end user: "
            own += _budget(key.end_user_budget or limits.end_user_budget)
            rows.append(_row(f"budget of {key.principal}", own))
    if config.prices:
        rows.append(_row("prices", ", ".join(sorted(config.prices)) + " (over the built-in)"))
    rows.append(_row("retention", _kept(config.retention)))
    return rows


def _budget(budget: Budget | None) -> str:
    parts = []
    if budget is not None and budget.tokens_per_day is not None:
        parts.append(f"{budget.tokens_per_day} tokens/day")
    if budget is not None and budget.cost_per_month_usd is not None:
        parts.append(f"{budget.cost_per_month_usd:g} USD/month")
    return ", ".join(parts) or "no limit"


def _kept(retention: RetentionConfig) -> str:
    kept = [
        f"{name} {days:g} d"
        for name, days in (
            ("sessions", retention.sessions_days),
            ("runs", retention.runs_days),
            ("files", retention.files_days),
            ("approvals", retention.approvals_days),
        )
        if days is not None
    ]
    return ", ".join(kept) or "everything kept forever"


def _server_lines(server: ServerConfig) -> list[str]:
    if server.api_keys:
        keys = ", ".join(
            f"{entry.principal} ({mask_secret(entry.key.get_secret_value())})"
            for entry in server.api_keys
        )
        auth = f"{len(server.api_keys)}: {keys}"
    else:
        auth = "none (no authentication)"
    return [
        _row("listen", f"{server.host}:{server.port}"),
        _row("api keys", auth),
        _row("max body", f"{server.max_body_bytes} bytes"),
        _row(
            "concurrent runs",
            f"{server.max_concurrent_runs} in total, {server.max_concurrent_runs_per_key} per key",
        ),
        _row("stop on disconnect", "yes" if server.stop_on_disconnect else "no"),
        _row("data dir", server.data_dir),
        _row("workspaces", server.resolved_workspaces_dir),
        _row(
            "uploaded files",
            f"{server.resolved_files_dir}; {server.files.max_file_mb:g} MB per file, "
            f"{server.files.quota_mb:g} MB and {server.files.max_files} files per key",
        ),
        _row("approvals expire", f"after {server.approval_timeout_seconds:g} s"),
        _row("database", mask_url(server.resolved_database_url)),
        _row(
            "replicas",
            f"shared through Redis {mask_url(server.redis_url.get_secret_value())}, "
            f"lease {server.lease_seconds:g} s"
            if server.redis_url is not None
            else "one process (no redis_url)",
        ),
        _row(
            "migrations at start",
            {None: "on SQLite only", True: "yes", False: "no"}[server.migrate_on_start],
        ),
        _row("stored responses", _retention(server)),
        _row(
            "busy session",
            f"wait up to {server.session_wait_seconds:g} s"
            if server.session_busy == "wait"
            else "refuse (409)"
            if server.session_busy in ("reject", "refuse")
            else server.session_busy,
        ),
    ]


def _web_lines(web: WebConfig) -> list[str]:
    search = web.search
    if search is None:
        backend = "none (web_search is not offered)"
    else:
        where = mask_url(search.url) if search.url else "the vendor's API"
        key = mask_secret(search.api_key.get_secret_value()) if search.api_key else "no key"
        backend = f"{search.backend} at {where}, {key}"
    return [
        _row("search", backend),
        _row("allow-listed", ", ".join(web.allow) or "nothing (public addresses only)"),
        _row(
            "fetch limits",
            f"{web.max_page_kb} KB, {web.timeout_seconds:g} s, {web.max_redirects} redirects",
        ),
    ]


def _webhook_lines(webhooks: list[WebhookConfig]) -> list[str]:
    """Each endpoint by its host only: a webhook URL's path or query often is its credential
    (a chat service's incoming-webhook URL), so it is no more shown than the secret."""
    if not webhooks:
        return [_row("endpoints", "none (no event is sent anywhere)")]
    rows = []
    for hook in webhooks:
        parts = urlsplit(hook.url)
        where = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"
        if parts.path not in ("", "/") or parts.query:
            where += "/…"
        events = "every event" if set(hook.events) == EVENT_TYPES else ", ".join(hook.events)
        secret = mask_secret(hook.secret.get_secret_value())
        rows.append(_row("endpoint", f"{where}: {events}; signed with {secret}"))
    return rows


def _provider_lines(provider: ProviderConfig) -> list[str]:
    if provider.base_url is not None:
        base_url = mask_url(provider.base_url)
    elif provider.name == SIMULATOR_PROVIDER:
        base_url = "(the built-in simulator, started by serve)"
    else:
        base_url = "(the vendor's default endpoint)"
    return [
        f"  {provider.name}",
        _row("api mode", provider.resolved_api_mode, indent=4),
        _row("model", provider.model, indent=4),
        _row("base url", base_url, indent=4),
        _row("key", key_source(provider), indent=4),
        _row("context window", f"{provider.context_window} tokens", indent=4),
        _row("max output", f"{provider.max_output_tokens} tokens", indent=4),
        _row("timeout", f"{provider.timeout:g} s", indent=4),
    ]


def key_source(provider: ProviderConfig) -> str:
    """Where ``provider``'s key comes from, in the order they are consulted, masked."""
    sources = []
    if provider.api_key_command:
        sources.append("a command (not shown)")
    if provider.api_key_file:
        sources.append(f"file {provider.api_key_file}")
    if provider.api_key_env:
        sources.append(f"env {provider.api_key_env}")
    if provider.api_key is not None:
        sources.append(mask_secret(provider.api_key.get_secret_value()))
    return ", else ".join(sources) if sources else "none"


def _profile_lines(profile: ProfileConfig) -> list[str]:
    auxiliary = " → ".join(profile.auxiliary_providers) or "(the main chain)"
    retry = profile.retry
    return [
        f"  {profile.id}" + (f" — {profile.description}" if profile.description else ""),
        _row("chain", " → ".join(profile.providers), indent=4),
        _row("auxiliary chain", auxiliary, indent=4),
        *(
            [_row("vision chain", " → ".join(profile.vision_providers), indent=4)]
            if profile.vision_providers
            else []
        ),
        *_tool_rows(profile),
        _row("max iterations", profile.max_iterations, indent=4),
        _row("max tokens", profile.max_tokens or "(the provider's default)", indent=4),
        _row(
            "retry",
            f"{retry.max_attempts} attempts, backoff {retry.base_delay:g}–{retry.max_delay:g} s",
            indent=4,
        ),
        _row("prompt cache ttl", profile.cache_ttl, indent=4),
        _row("open webui mode", "yes" if profile.openwebui else "no", indent=4),
        _row("instructions", _preview(profile.instructions), indent=4),
    ]


def _skill_rows(profile: ProfileConfig, options: ToolsetOptions) -> list[str]:
    """The profile's directory skills, and the skill folders left out (with why)."""
    if not profile.skills.enabled:
        return [_row("skills", "off (skills.enabled: false)", indent=4)]
    loaded = load_directory_skills(profile.skills.dirs)
    names = ", ".join(s.entry.name for s in loaded.skills) or "(none of its own)"
    policy = options.approval(TOOLSETS[SKILLS_TOOLSET])
    rows = [_row("skills", f"{names}; skill_manage approval: {policy}", indent=4)]
    for place, why in loaded.broken.items():
        rows.append(_row(f"  {place}", f"BROKEN, left out: {why}", indent=4))
    return rows


def _tool_rows(profile: ProfileConfig) -> list[str]:
    """The toolsets on, and those asked for that stay off here (with why)."""
    options = profile.toolset_options()
    built = build_toolsets(profile.tools, options)
    rows = [_row("tools", ", ".join(built.active), indent=4)]
    for name, reason in built.unavailable.items():
        rows.append(_row(f"  {name}", f"UNAVAILABLE, stays off: {reason}", indent=4))
    for name in built.active:
        if not TOOLSETS[name].always_on:
            policy = options.approval(TOOLSETS[name])
            rows.append(_row(f"  {name}", f"approval: {policy}", indent=4))
    rows += _skill_rows(profile, options)
    for server in profile.mcp_servers:
        # A command's arguments are not shown: they may hold a token.
        where = (
            mask_url(server.url) if server.url else f"{server.command} (+{len(server.args)} args)"
        )
        rows.append(
            _row(
                f"  mcp {server.name}",
                f"{'http' if server.url else 'stdio'}: {where}; approval: {server.approval}",
                indent=4,
            )
        )
    if {"shell", "code"} & set(built.active):
        sandbox = profile.sandbox
        mode = "NONE (unsafe_no_sandbox)" if sandbox.unsafe_no_sandbox else "bubblewrap"
        network = "no network"
        if sandbox.network == "restricted":
            network = f"network to {', '.join(sandbox.allowed_hosts)} via the egress proxy"
        elif sandbox.network:
            network = "network to public hosts via the egress proxy"
        rows.append(
            _row(
                "sandbox", f"{mode}, {network}, {sandbox.timeout_seconds:g} s per command", indent=4
            )
        )
        rows.append(_row("isolation", isolation().summary(), indent=4))
    if {"shell", "code", "files"} & set(built.active):
        rows += _python_rows(options.policy)
    return rows


def _python_rows(policy: SandboxPolicy) -> list[str]:
    """What Python commands (and read_file's document extraction) get in the sandbox."""
    contents = environment_contents(policy)
    version = f" (Python {contents.version})" if contents.version else ""
    rows = [_row("python", f"{contents.executable}{version}", indent=4)]
    if contents.problem:
        rows.append(_row("  environment", contents.problem, indent=4))
    if contents.packages:
        listed = ", ".join(f"{name} {version}" for name, version in contents.packages)
        rows.append(_row("  packages", listed, indent=4))
    return rows


def _preview(text: str) -> str:
    text = text.strip()
    if not text:
        return "(none)"
    first = text.splitlines()[0]
    if len(first) > _INSTRUCTIONS_PREVIEW:
        first = first[:_INSTRUCTIONS_PREVIEW] + "…"
    return f"{len(text)} chars: {first!r}"


def config_warnings(config: HermesConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """Things that are valid but probably not meant: an open server, a key that is missing."""
    env = os.environ if environ is None else environ
    warnings = []
    server = config.server
    if not server.api_keys and not server.loopback_only:
        warnings.append(
            f"server.host is {server.host} but no API keys are set: anyone who can reach the "
            "server may use it (set server.api_keys or HERMES_API_KEYS)"
        )
    for provider in config.providers:
        if provider.api_key_env and not env.get(provider.api_key_env, "").strip():
            warnings.append(
                f"provider {provider.name}: environment variable {provider.api_key_env} is not set"
            )
        if provider.api_key_file and not Path(provider.api_key_file).is_file():
            warnings.append(
                f"provider {provider.name}: key file {provider.api_key_file} is missing"
            )
        unkeyed = key_source(provider) == "none" and provider.base_url is None
        if unkeyed and provider.name != SIMULATOR_PROVIDER:
            warnings.append(f"provider {provider.name}: no API key is configured")
    return warnings


def _retention(server: ServerConfig) -> str:
    limits = []
    if server.responses_max_count is not None:
        limits.append(f"at most {server.responses_max_count}")
    if server.responses_max_age_days is not None:
        limits.append(f"for {server.responses_max_age_days:g} days")
    return ", ".join(limits) or "kept until deleted"
