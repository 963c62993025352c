"""Settings the server only uses once it runs — the database and Redis URLs, a provider's key
command and address — are checked when the configuration loads, so that ``check-config`` finds
them and ``serve`` stops on one line naming the setting (never a traceback, never the password),
rather than failing at start or on every run."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import ConfigError, describe, load_config

PASSWORD = "Pw0rd-never-shown-4821"


def problems_of(environ: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        load_config(None, environ)
    return raised.value.problems


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            f"postgres://hermes:{PASSWORD}@db/hermes",
            "server.database_url: postgres:// names no driver this server has: write "
            "postgresql+asyncpg://… (from DATABASE_URL)",
        ),
        (
            f"postgresql://hermes:{PASSWORD}@db/hermes",
            "server.database_url: postgresql:// names no driver this server has: write "
            "postgresql+asyncpg://… (from DATABASE_URL)",
        ),
        (
            "sqlite:///data/hermes.db",
            "server.database_url: sqlite:// names no driver this server has: write "
            "sqlite+aiosqlite:///… (from DATABASE_URL)",
        ),
        (
            f"mysql://hermes:{PASSWORD}@db/hermes",
            "server.database_url: mysql:// is not supported: the URL must start with "
            "sqlite+aiosqlite:// or postgresql+asyncpg:// (from DATABASE_URL)",
        ),
        (
            f"hermes:{PASSWORD}@db/hermes",
            "server.database_url: not a URL: it must start with sqlite+aiosqlite:// or "
            "postgresql+asyncpg:// (from DATABASE_URL)",
        ),
        (
            f"postgresql+asyncpg://hermes:{PASSWORD}@db:port/hermes",
            "server.database_url: its port is not a number from 0 to 65535 (from DATABASE_URL)",
        ),
    ],
)
def test_a_database_url_the_server_cannot_open_is_named_without_its_password(
    url: str, expected: str
) -> None:
    problems = problems_of({"DATABASE_URL": url})
    assert problems == [expected]
    assert PASSWORD not in "".join(problems)


def test_a_redis_url_of_another_scheme_is_named_without_its_password() -> None:
    problems = problems_of({"REDIS_URL": f"http://:{PASSWORD}@cache:6379/0"})
    assert problems == [
        "server.redis_url: http:// is not supported: the URL must start with redis://, "
        "rediss:// or unix:// (from REDIS_URL)"
    ]


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+asyncpg://hermes:{PASSWORD}@db:5432/hermes",
        "sqlite+aiosqlite:///var/lib/hermes/hermes.db",
        f"redis://:{PASSWORD}@cache:6379/0",
        "rediss://cache.internal",
        "unix:///run/redis.sock",
    ],
)
def test_urls_the_server_can_use_are_accepted(url: str) -> None:
    variable = "DATABASE_URL" if "sql" in url else "REDIS_URL"
    load_config(None, {variable: url})


def test_a_key_command_that_is_not_a_command_line_is_named_without_showing_it(
    tmp_path: Path,
) -> None:
    command = f'op read "op://ci/{PASSWORD}'  # an unbalanced quote
    config = (
        "providers:\n"
        f"  - {{name: claude, model: m, base_url: 'http://127.0.0.1:9/v1', "
        f"api_key_command: '{command}'}}\n"
    )
    path = tmp_path / "hermes.yaml"
    path.write_text(config)
    with pytest.raises(ConfigError) as raised:
        load_config(path, {})
    assert raised.value.problems == [
        "providers[0].api_key_command: not a valid command line (no closing quotation)"
    ]
    assert PASSWORD not in str(raised.value)


def test_credentials_in_a_providers_base_url_are_refused_without_showing_them() -> None:
    problems = problems_of(
        {
            "HERMES_UPSTREAM_BASE_URL": f"https://gateway:{PASSWORD}@llm.example/v1",
            "HERMES_UPSTREAM_MODEL": "m",
        }
    )
    assert problems == [
        "providers[0].base_url: must not hold credentials (user:password@); give the key as "
        "api_key, api_key_env, api_key_file or api_key_command (from HERMES_UPSTREAM_BASE_URL)"
    ]


def test_check_config_lists_webhooks_by_host_never_their_path_or_secret(tmp_path: Path) -> None:
    token, secret = "T000/B000/path-token-never-shown", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    path = tmp_path / "hermes.yaml"
    path.write_text(
        "webhooks:\n"
        f"  - {{url: 'https://hooks.example.com/services/{token}', secret: {secret}}}\n"
        f"  - {{url: 'https://ops.example.com:8443', secret: {secret}, events: [run.failed]}}\n"
    )
    text = describe(load_config(path, {}))
    assert token not in text
    assert secret not in text
    assert (
        "  endpoint            https://hooks.example.com/…: every event; signed with whs…LaSw"
    ) in text
    assert "  endpoint            https://ops.example.com:8443: run.failed; signed with" in text


def test_a_providers_base_url_without_a_scheme_is_refused_naming_the_variable() -> None:
    problems = problems_of(
        {"HERMES_UPSTREAM_BASE_URL": "openrouter.ai/api/v1", "HERMES_UPSTREAM_MODEL": "m"}
    )
    assert problems == [
        "providers[0].base_url: must be an http:// or https:// URL (e.g. "
        "https://api.example.com/v1) (from HERMES_UPSTREAM_BASE_URL)"
    ]
