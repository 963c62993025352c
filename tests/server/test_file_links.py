"""Names for workspace files that leave the server: container and file ids, signed links."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from server.files.links import (
    FileLinks,
    FileLinkSettings,
    LinkRefused,
    LinkSigner,
    LinkTarget,
    container_id,
    container_root,
    file_id,
    path_of,
    secret_path,
)
from server.files.workspaces import conversation_workspace

TARGET = LinkTarget("0123abcd/89ef", "charts/sales q1.png")


def test_a_container_id_resolves_to_its_workspace_for_its_owner_only(tmp_path: Path) -> None:
    alice = conversation_workspace(tmp_path, "alice", "report")
    bob = conversation_workspace(tmp_path, "bob", "report")

    id_alice = container_id("alice", alice)

    assert id_alice.startswith("cntr_")
    assert container_root(tmp_path, "alice", id_alice) == alice
    assert container_id("bob", bob) != id_alice  # the same name under two keys: two ids
    assert container_root(tmp_path, "bob", id_alice) not in (alice, bob)


@pytest.mark.parametrize("given", ["cntr_xyz", "file_0123", "cntr_" + "g" * 32, ""])
def test_a_malformed_container_id_names_nothing(tmp_path: Path, given: str) -> None:
    assert container_root(tmp_path, "alice", given) is None


@pytest.mark.parametrize("path", ["chart.png", "out/deep/r\u00e9sum\u00e9 (v2).pdf"])
def test_a_file_id_gives_back_its_path(path: str) -> None:
    assert path_of(file_id(path)) == path


@pytest.mark.parametrize("given", ["cfile_", "file_abc", "cfile_!!!"])
def test_a_malformed_file_id_names_nothing(given: str) -> None:
    assert path_of(given) is None


def test_a_signed_token_grants_its_path_until_it_expires() -> None:
    signer = LinkSigner(b"s" * 64)
    token = signer.sign(TARGET, expires_at=1_000)

    assert signer.check(token, now=999) == TARGET
    with pytest.raises(LinkRefused) as expired:
        signer.check(token, now=1_000)
    assert expired.value.code == "link_expired"


def test_a_token_with_any_character_changed_is_refused() -> None:
    signer = LinkSigner(b"s" * 64)
    token = signer.sign(TARGET, expires_at=10**10)

    for position, character in enumerate(token):
        changed = token[:position] + ("A" if character != "A" else "B") + token[position + 1 :]
        with pytest.raises(LinkRefused) as refused:
            signer.check(changed, now=0)
        assert refused.value.code == "invalid_link", position


def test_another_servers_secret_refuses_the_token() -> None:
    token = LinkSigner(b"s" * 64).sign(TARGET, expires_at=10**10)
    with pytest.raises(LinkRefused):
        LinkSigner(b"t" * 64).check(token, now=0)


def test_replicas_starting_together_share_one_secret(tmp_path: Path) -> None:
    signers: list[LinkSigner] = []

    def start() -> None:
        signers.append(LinkSigner.from_file(secret_path(tmp_path)))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    token = signers[0].sign(TARGET, expires_at=10**10)
    assert all(signer.check(token, now=0) == TARGET for signer in signers)
    assert secret_path(tmp_path).stat().st_mode & 0o077 == 0
    assert [p.name for p in tmp_path.iterdir()] == [secret_path(tmp_path).name]


def test_links_use_the_public_url_when_one_is_set() -> None:
    assert FileLinks().base_url("http://10.0.0.5:8000/") == "http://10.0.0.5:8000"
    public = FileLinks(FileLinkSettings(public_url="https://hermes.example.com/api/"))
    assert public.base_url("http://10.0.0.5:8000/") == "https://hermes.example.com/api"
