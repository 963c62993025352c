"""A profile's vision chain: ``vision_analyze`` is offered when a model of the main chain
cannot see images (``vision: false``), and the chain's names are checked like any other."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.bootstrap import build_profiles
from server.config import ConfigError, load_config
from server.config.describe import describe
from tests.server.config.test_config import write

VISION = """\
providers:
  - {{name: words, model: text-only, base_url: "http://127.0.0.1:9/v1", vision: {seeing}}}
  - {{name: eyes, model: seer, base_url: "http://127.0.0.1:9/v1"}}
profiles:
  - id: reader
    providers: [words]
    vision_providers: [{eyes}]
"""


def test_a_text_only_main_model_gets_vision_analyze_on_the_vision_chain(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VISION.format(seeing="false", eyes="eyes")), {})
    assert config.providers[0].vision is False
    assert config.providers[1].vision is True  # most models see: the default
    [profile] = build_profiles(config)
    assert "vision_analyze" in profile.tools


def test_a_main_model_that_sees_is_not_offered_vision_analyze(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VISION.format(seeing="true", eyes="eyes")), {})
    [profile] = build_profiles(config)
    assert "vision_analyze" not in profile.tools


def test_a_vision_chain_naming_an_unknown_provider_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, VISION.format(seeing="false", eyes="ghost")), {})
    assert "profiles[0].vision_providers[0]: profile 'reader' names unknown provider 'ghost'" in (
        str(caught.value)
    )


def test_check_config_shows_the_vision_chain(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VISION.format(seeing="false", eyes="eyes")), {})
    lines = describe(config).splitlines()
    assert any(line.split() == ["vision", "chain", "eyes"] for line in lines), lines
