"""``hermes-server serve`` that cannot start says why on one line naming the setting, exits 2,
and never prints a traceback or a password: a database URL of a driver it does not have, a
PostgreSQL it cannot use (no such database, a schema behind this release), a Redis it cannot
reach, a log format it does not know, a data directory it cannot write in, a file where a
directory should be."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.databases import fresh_database, server_url_or_skip
from tests.processes import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]
PASSWORD = "Pw0rd-never-shown-9137"


def serve(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    """``serve`` on the embedded defaults plus ``environ``, to its exit (or a 60 s timeout:
    a server that started after all)."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HERMES_", "ANTHROPIC_", "OPENAI_", "OTEL_"))
        and k not in ("DATABASE_URL", "REDIS_URL")
    }
    return subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--port", str(free_port())],
        cwd=REPO,
        env={**inherited, "HERMES_DATA_DIR": str(tmp_path / "data"), **environ},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one line the refused start said why in."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert PASSWORD not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("hermes-server:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_postgres_url_without_the_servers_driver_is_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    result = serve(tmp_path, DATABASE_URL=f"postgres://hermes:{PASSWORD}@127.0.0.1:1/hermes")
    assert refusal(result) == "hermes-server: invalid configuration:"
    assert (
        "  - server.database_url: postgres:// names no driver this server has: write "
        "postgresql+asyncpg://… (from DATABASE_URL)"
    ) in result.stderr.splitlines()


def test_a_redis_that_cannot_be_reached_is_named_with_its_password_masked(
    tmp_path: Path,
) -> None:
    port = free_port()  # nothing listens there
    result = serve(tmp_path, REDIS_URL=f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    line = refusal(result)
    assert line.startswith(
        f"hermes-server: server.redis_url: cannot use Redis at redis://:***@127.0.0.1:{port}/0: "
    ), line


def test_an_unknown_log_format_in_the_environment_is_refused(tmp_path: Path) -> None:
    result = serve(tmp_path, HERMES_LOG_FORMAT="xml")
    assert refusal(result) == "hermes-server: HERMES_LOG_FORMAT: must be text or json, not 'xml'"


def test_a_data_dir_that_cannot_hold_the_servers_files_is_named(tmp_path: Path) -> None:
    occupied = tmp_path / "data"
    occupied.write_text("a file where the directory should be")
    result = serve(tmp_path)  # HERMES_DATA_DIR is tmp_path/data
    assert refusal(result) == f"hermes-server: server.data_dir: {occupied} is not a directory"


async def test_a_postgresql_whose_schema_is_behind_is_named_with_what_to_run(
    tmp_path: Path,
) -> None:
    async with fresh_database("postgresql", tmp_path) as url:  # empty: no schema at all
        result = serve(tmp_path, DATABASE_URL=url)
    assert refusal(result).startswith(
        "hermes-server: server.database_url: The database is at schema revision none, this "
        "server needs "
    )
    assert refusal(result).endswith(": run `hermes-server db upgrade`.")


def test_a_postgresql_database_that_does_not_exist_is_named_with_its_password_masked(
    tmp_path: Path,
) -> None:
    server = make_url(server_url_or_skip())
    url = server.set(password=PASSWORD, database="no_such_database")
    result = serve(tmp_path, DATABASE_URL=url.render_as_string(hide_password=False))
    masked = url.render_as_string(hide_password=True)  # user:***@host
    assert refusal(result) == (
        f"hermes-server: server.database_url: cannot use {masked}: "
        'database "no_such_database" does not exist'
    )


def test_db_upgrade_says_what_the_database_answered_with_its_password_masked(
    tmp_path: Path,
) -> None:
    url = make_url(server_url_or_skip()).set(password=PASSWORD, database="no_such_database")
    result = subprocess.run(
        [sys.executable, "-m", "server.cli", "db", "upgrade"],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": url.render_as_string(hide_password=False)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert PASSWORD not in result.stderr
    assert result.stderr.strip() == (
        f"hermes-server: cannot upgrade {url.render_as_string(hide_password=True)}: "
        'database "no_such_database" does not exist'
    )


def test_a_files_directory_that_is_a_file_is_named(tmp_path: Path) -> None:
    occupied = tmp_path / "uploads"
    occupied.write_text("a file where the uploads should go")
    config = tmp_path / "hermes.yaml"
    config.write_text(f"server:\n  files: {{dir: '{occupied}'}}\n")
    result = serve(tmp_path, HERMES_CONFIG=str(config))
    assert refusal(result) == f"hermes-server: server.files.dir: {occupied} is not a directory"
