"""Crash recovery whatever the host name: a server started again on the same data directory
closes the runs it left live, even from a recreated container with another host name."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hermes_core.persistence import Store
from server.bootstrap import build_services
from server.config import load_config
from server.replicas.instance import instance_name


def test_the_instance_id_is_made_once_and_kept_in_the_data_directory(tmp_path: Path) -> None:
    first = instance_name(tmp_path / "data")
    assert first.startswith("inst_")
    assert instance_name(tmp_path / "data") == first
    assert (tmp_path / "data" / "instance").read_text().strip() == first
    assert instance_name(tmp_path / "elsewhere") != first


async def test_a_restart_under_a_new_host_name_recovers_the_runs_it_left_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"HERMES_DATA_DIR": str(tmp_path / "data")}
    monkeypatch.setattr(socket, "gethostname", lambda: "container-1")
    before = build_services(load_config(None, environ=environ))
    await before.open()
    assert before.store is not None
    before.store.runs.started(
        run_id="run_cut",
        owner="alice",
        endpoint="chat.completions",
        model="hermes-agent",
        session_id=None,
        completion_id="chatcmpl-cut",
        created_at=1.0,
    )
    await before.store.db.writer.flush()
    # Killed here: the run is still "running" on record. Closing the services (not only the
    # store) stops their background tasks too, which would otherwise go on using the closed
    # store's engine and leave its connections unclosed when the loop ends.
    await before.close()

    monkeypatch.setattr(socket, "gethostname", lambda: "container-2")  # recreated
    after = build_services(load_config(None, environ=environ))
    await after.open()
    try:
        assert after.store is not None
        record = await after.store.runs.get("alice", "run_cut")
        assert record is not None
        assert (record.status, record.exit_reason) == ("interrupted", "interrupted")
    finally:
        await after.close()


async def test_a_configured_instance_name_wins(tmp_path: Path) -> None:
    environ = {"HERMES_DATA_DIR": str(tmp_path / "data"), "HERMES_INSTANCE": "replica-a"}
    services = build_services(load_config(None, environ=environ))
    assert services.instance == "replica-a"
    store = await Store.open(services.database_url or "", instance=services.instance)
    try:
        assert store.runs.instance == "replica-a"
    finally:
        await store.close()
