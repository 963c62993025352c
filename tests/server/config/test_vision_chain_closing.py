"""A profile's vision chain is closed with the rest of the profile: its HTTP clients do not
outlive a reload that replaced the profile, nor the server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from hermes_core.providers.fallback import FallbackChain
from server.bootstrap import build_profiles
from server.config import load_config
from server.process.reload import _retire
from server.profiles import Profile
from server.services import Services
from tests.server.config.test_config import write
from tests.server.config.test_vision_config import VISION


def _reader(tmp_path: Path) -> Profile:
    config = load_config(write(tmp_path, VISION.format(seeing="false", eyes="eyes")), {})
    [profile] = build_profiles(config)
    return profile


def _record_closing(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the vision chain's members, as each is closed."""
    assert isinstance(profile.vision, FallbackChain)
    closed: list[str] = []
    for member in profile.vision.providers:
        real = member.aclose

        # Defaults bind this member's name and method (a closure would see the last one's).
        async def aclose(
            name: str = member.name, real: Callable[[], Awaitable[None]] = real
        ) -> None:
            closed.append(name)
            await real()

        monkeypatch.setattr(member, "aclose", aclose)
    return closed


def test_the_profile_holds_the_chain_vision_analyze_calls(tmp_path: Path) -> None:
    profile = _reader(tmp_path)
    assert profile.vision is not None
    assert profile.vision in profile.chains
    assert "vision_analyze" in profile.tools


async def test_closing_the_services_closes_a_profiles_vision_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = _reader(tmp_path)
    closed = _record_closing(profile, monkeypatch)
    await Services(profiles=[profile]).close()
    assert closed == ["eyes"]


async def test_retiring_a_replaced_profile_closes_its_vision_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = _reader(tmp_path)
    closed = _record_closing(profile, monkeypatch)
    await _retire([profile], [])
    assert closed == ["eyes"]


def test_a_profile_without_a_vision_chain_holds_none(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VISION.format(seeing="true", eyes="eyes")), {})
    [profile] = build_profiles(config)
    assert profile.vision is None
    assert len(profile.chains) == 1
