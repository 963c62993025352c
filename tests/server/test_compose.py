"""compose.yaml, the production-like deployment: PostgreSQL, Redis, a migration, two replicas
and a load balancer. No container engine runs here, so the file is checked as written: its
replicas run the commands the tests run, each keeps its own instance, and the load balancer
streams."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from server.config import ConfigError, load_config
from server.config.schema import ServerConfig
from tests.server.test_dockerfile import _all

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def test_two_replicas_share_postgres_and_redis_and_keep_their_own_data() -> None:
    services = _compose()["services"]
    replicas = [services["hermes-a"], services["hermes-b"]]
    for replica in replicas:
        environment = replica["environment"]
        assert environment["DATABASE_URL"].startswith("postgresql+asyncpg://")
        assert environment["REDIS_URL"].startswith("redis://redis:")
        assert replica["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    volumes = [replica["volumes"][0].split(":")[0] for replica in replicas]
    assert len(set(volumes)) == 2  # each its own instance name


def test_both_replicas_mount_one_shared_volume_where_the_server_keeps_files() -> None:
    services = _compose()["services"]
    shared_dir = services["hermes-a"]["environment"]["HERMES_SHARED_DIR"]
    mounts = [
        {volume for volume in services[name]["volumes"] if volume.endswith(":" + shared_dir)}
        for name in ("hermes-a", "hermes-b")
    ]
    assert mounts[0] == mounts[1] == {f"shared:{shared_dir}"}
    assert "shared" in _compose()["volumes"]
    # The image's user owns the mount point, so a new named volume is writable by it.
    assert f"mkdir -p /data {shared_dir}" in (ROOT / "Dockerfile").read_text()


def test_the_replicas_environment_loads_and_refuses_to_start_without_an_upstream() -> None:
    environment = {
        name: value
        for name, value in _compose()["services"]["hermes-a"]["environment"].items()
        if "${" not in value  # what compose fills from the shell: unset here
    }
    environment |= {"HERMES_HOST": "0.0.0.0", "HERMES_API_KEYS": "alice:sk-compose-0123456789"}
    with pytest.raises(ConfigError, match="no upstream model configured"):
        load_config(None, environment)
    config = load_config(None, environment | {"HERMES_UPSTREAM": "simulator"})
    assert config.server.resolved_files_dir == Path("/shared/files")


def test_the_replicas_run_the_images_own_serve_command_and_migrate_once() -> None:
    services = _compose()["services"]
    [cmd] = _all("CMD")
    assert services["hermes-a"]["command"] == yaml.safe_load(cmd)
    assert services["migrate"]["command"] == ["db", "upgrade"]


def test_a_replica_gets_longer_than_its_drain_to_stop() -> None:
    grace = _compose()["services"]["hermes-a"]["stop_grace_period"]
    assert int(grace.removesuffix("s")) > ServerConfig().drain_seconds
    assert "/ready" in " ".join(_compose()["services"]["hermes-a"]["healthcheck"]["test"])


def test_the_load_balancer_spreads_over_both_replicas_and_does_not_buffer_streams() -> None:
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "server hermes-a:8000" in conf
    assert "server hermes-b:8000" in conf
    assert "proxy_buffering off;" in conf
    assert "proxy_read_timeout 3600s;" in conf


def test_every_long_running_service_restarts_and_the_migration_runs_once() -> None:
    services = _compose()["services"]
    for name, service in services.items():
        if name == "migrate":
            assert "restart" not in service  # a one-shot job: its success starts the replicas
        else:
            assert service["restart"] == "unless-stopped", name


def test_redis_is_persisted_capped_and_never_evicts_a_lease() -> None:
    redis = _compose()["services"]["redis"]
    arguments = redis["command"][1:]
    settings = dict(zip(arguments[::2], arguments[1::2], strict=True))
    assert settings["--appendonly"] == "yes"
    assert settings["--maxmemory-policy"] == "noeviction"
    assert settings["--maxmemory"].endswith("mb")
    assert redis["volumes"] == ["redis:/data"]
    # The tests' Redis (.ci/redis) runs with the same settings.
    script = (ROOT / ".ci" / "redis").read_text()
    for option, value in settings.items():
        assert f"{option} {value}" in script


def test_the_load_balancer_starts_once_the_replicas_are_ready() -> None:
    depends = _compose()["services"]["lb"]["depends_on"]
    assert depends == {
        "hermes-a": {"condition": "service_healthy"},
        "hermes-b": {"condition": "service_healthy"},
    }


def test_every_health_check_is_one_the_tests_run() -> None:
    services = _compose()["services"]
    checks = {
        name: " ".join(s["healthcheck"]["test"])
        for name, s in services.items()
        if "healthcheck" in s
    }
    assert "pg_isready" in checks["postgres"]
    assert "pg_isready" in (ROOT / ".ci" / "postgres").read_text()
    assert "redis-cli ping" in checks["redis"]
    assert 'redis-cli -p "$port" ping' in (ROOT / ".ci" / "redis").read_text()
    for replica in ("hermes-a", "hermes-b"):
        assert "http://127.0.0.1:8000/ready" in checks[replica]  # what the tests wait on
