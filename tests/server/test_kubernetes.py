"""deploy/kubernetes/hermes-server.yaml, the minimal Kubernetes set. No cluster runs here, so
the file is held to what the server does: its commands are the image's, its probes the
server's endpoints, its grace period longer than the drain, its settings ones the server
reads, its shared volume writable by every replica."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from server.config import load_config
from server.config.schema import ServerConfig
from tests.server.test_dockerfile import _all

ROOT = Path(__file__).resolve().parents[2]


def _documents() -> dict[str, dict[str, Any]]:
    text = (ROOT / "deploy" / "kubernetes" / "hermes-server.yaml").read_text()
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text) if doc}


def _server() -> dict[str, Any]:
    [container] = _documents()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_the_replicas_serve_with_the_images_command_and_the_job_migrates_once() -> None:
    [cmd] = _all("CMD")
    assert _server()["args"] == yaml.safe_load(cmd)
    [migrate] = _documents()["Job"]["spec"]["template"]["spec"]["containers"]
    assert migrate["args"] == ["db", "upgrade"]
    assert _documents()["Deployment"]["spec"]["replicas"] >= 2


def test_readiness_is_ready_and_liveness_is_health() -> None:
    server = _server()
    assert server["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert server["livenessProbe"]["httpGet"]["path"] == "/health"
    assert server["startupProbe"]["httpGet"]["path"] == "/health"


def test_a_pod_is_taken_out_of_the_service_then_drains_before_it_is_killed() -> None:
    pod = _documents()["Deployment"]["spec"]["template"]["spec"]
    pre_stop = _server()["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > int(pre_stop[1]) + ServerConfig().drain_seconds


def test_every_replica_mounts_one_shared_volume_where_the_server_keeps_files() -> None:
    documents = _documents()
    claim = documents["PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = documents["Deployment"]["spec"]["template"]["spec"]
    [shared] = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert shared["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    [mount] = [m for m in _server()["volumeMounts"] if m["name"] == shared["name"]]
    env = {e["name"]: e.get("value") for e in _server()["env"]}
    assert env["HERMES_SHARED_DIR"] == mount["mountPath"]
    assert pod["securityContext"]["fsGroup"] == 10001  # the image's user (Dockerfile)
    assert "--uid 10001" in (ROOT / "Dockerfile").read_text()


def test_its_settings_load_with_secrets_read_from_mounted_files(tmp_path: Path) -> None:
    """The Deployment's environment, with the secret's files where it mounts them, loads into
    the configuration it means."""
    secrets = {
        "database-url": "postgresql+asyncpg://hermes:pw@postgres:5432/hermes",
        "redis-url": "redis://redis:6379/0",
        "api-keys": "alice:sk-kubernetes-0123456789",
        "upstream-api-key": "sk-upstream-0123456789",
    }
    for name, value in secrets.items():
        (tmp_path / name).write_text(value + "\n")  # kubectl keeps a trailing newline
    environ = {}
    for entry in _server()["env"]:
        if "value" in entry:
            environ[entry["name"]] = entry["value"].replace("/run/secrets/hermes", str(tmp_path))
    environ["HERMES_INSTANCE"] = "hermes-server-7d9f-abcde"  # the pod's name, from the API
    config = load_config(None, environ)
    server = config.server
    assert server.database_url is not None
    assert server.redis_url is not None
    assert server.database_url.get_secret_value() == secrets["database-url"]
    assert server.redis_url.get_secret_value() == secrets["redis-url"]
    assert [k.key.get_secret_value() for k in server.api_keys] == ["sk-kubernetes-0123456789"]
    assert server.shared_dir == Path("/shared")
    assert server.resolved_files_dir == Path("/shared/files")
    assert server.resolved_workspaces_dir == Path("/shared/workspaces")
    [upstream] = config.providers
    assert upstream.api_key is not None
    assert upstream.api_key.get_secret_value() == secrets["upstream-api-key"]
