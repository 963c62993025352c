"""Settings a deployment of several replicas needs: secrets read from mounted files
(``NAME_FILE``), one shared volume for uploads and workspaces (``HERMES_SHARED_DIR``), and no
silent simulator on an address others reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import ConfigError, load_config

UPSTREAM = {"HERMES_UPSTREAM_BASE_URL": "https://llm.example/v1", "HERMES_UPSTREAM_MODEL": "m"}


def test_a_secret_comes_from_the_file_its_file_variable_names(tmp_path: Path) -> None:
    (tmp_path / "database-url").write_text("postgresql+asyncpg://h:pw@db/h\n")
    (tmp_path / "keys").write_text("alice:sk-from-a-file-0123456789\n")
    config = load_config(
        None,
        {
            "DATABASE_URL_FILE": str(tmp_path / "database-url"),
            "HERMES_API_KEYS_FILE": str(tmp_path / "keys"),
            **UPSTREAM,
        },
    )
    assert config.server.database_url is not None
    assert config.server.database_url.get_secret_value() == "postgresql+asyncpg://h:pw@db/h"
    assert [k.principal for k in config.server.api_keys] == ["alice"]


def test_the_variable_itself_wins_over_its_file(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("redis://from-file:6379/0")
    environ = {"REDIS_URL": "redis://from-env:6379/0", "REDIS_URL_FILE": str(tmp_path / "url")}
    config = load_config(None, environ)
    assert config.server.redis_url is not None
    assert config.server.redis_url.get_secret_value() == "redis://from-env:6379/0"


def test_an_unreadable_secret_file_names_the_variable_and_path_never_a_content(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, {"HERMES_UPSTREAM_API_KEY_FILE": str(tmp_path / "absent"), **UPSTREAM})
    assert refused.value.problems == [
        f"HERMES_UPSTREAM_API_KEY_FILE: cannot read {tmp_path / 'absent'} (No such file or "
        "directory)"
    ]


def test_a_reference_in_the_file_reads_a_mounted_secret(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("sk-upstream-from-a-file\n")
    path = tmp_path / "hermes.yaml"
    path.write_text(
        "providers:\n  - {name: up, model: m, base_url: 'https://llm.example/v1', "
        "api_key: '${UP_KEY}'}\n"
    )
    config = load_config(path, {"UP_KEY_FILE": str(tmp_path / "key")})
    key = config.provider("up").api_key
    assert key is not None
    assert key.get_secret_value() == "sk-upstream-from-a-file"


def test_uploads_and_workspaces_live_on_the_shared_volume() -> None:
    config = load_config(None, {"HERMES_SHARED_DIR": "/shared", "HERMES_DATA_DIR": "/data"})
    server = config.server
    assert server.resolved_files_dir == Path("/shared/files")
    assert server.resolved_workspaces_dir == Path("/shared/workspaces")
    assert server.resolved_database_url.endswith("/data/hermes.db")  # the replica's own


def test_without_a_shared_volume_they_live_in_the_data_dir() -> None:
    server = load_config(None, {"HERMES_DATA_DIR": "/data"}).server
    assert server.resolved_files_dir == Path("/data/files")
    assert server.resolved_workspaces_dir == Path("/data/workspaces")


def test_a_server_others_reach_without_an_upstream_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, {"HERMES_HOST": "0.0.0.0", "HERMES_API_KEYS": "sk-0123456789abcdef"})
    [problem] = refused.value.problems
    assert problem.startswith("no upstream model configured, on a server listening on 0.0.0.0")
    assert "HERMES_UPSTREAM=simulator" in problem


@pytest.mark.parametrize(
    "environ",
    [
        {"HERMES_HOST": "0.0.0.0", "HERMES_UPSTREAM": "simulator"},  # a demo, on purpose
        {"HERMES_HOST": "127.0.0.1"},  # a fresh machine: the simulator answers
        {"HERMES_HOST": "0.0.0.0", **UPSTREAM},
    ],
    ids=["asked for", "loopback", "an upstream"],
)
def test_the_simulator_stands_in_only_where_it_cannot_surprise(environ: dict[str, str]) -> None:
    load_config(None, environ)


def test_a_profile_naming_the_simulator_asked_for_it(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text("server: {host: 0.0.0.0}\nprofiles: [{id: demo, providers: [simulator]}]\n")
    assert load_config(path, {}).uses_simulator


def test_hermes_upstream_understands_only_the_simulator() -> None:
    with pytest.raises(ConfigError, match="only 'simulator' is understood"):
        load_config(None, {"HERMES_UPSTREAM": "openai"})
