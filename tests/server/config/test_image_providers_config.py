"""A profile's image providers: ``generate_image`` (toolset ``images``) is on when it has some,
and the chain's names are checked like any other, and held to OpenAI-wire providers."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.bootstrap import build_profiles
from server.config import ConfigError, load_config
from tests.server.config.test_config import write

IMAGES = """\
providers:
  - {{name: words, model: chat, base_url: "http://127.0.0.1:9/v1"}}
  - {{name: painter, model: gpt-image-1, base_url: "http://127.0.0.1:9/v1"}}
  - {{name: claude, model: claude-x, api_mode: anthropic_messages,
      base_url: "http://127.0.0.1:9"}}
profiles:
  - id: artist
    providers: [words]
    image_providers: [{images}]
  - id: writer
    providers: [words]
    tools: [{writer_tools}]
"""


def _config(tmp_path: Path, images: str = "painter", writer_tools: str = "files") -> Path:
    return write(tmp_path, IMAGES.format(images=images, writer_tools=writer_tools))


def test_a_profile_with_image_providers_offers_generate_image(tmp_path: Path) -> None:
    artist, writer = build_profiles(load_config(_config(tmp_path), {}))
    assert "generate_image" in artist.tools
    assert "images" in artist.toolsets
    assert artist.uses_workspace  # the image is a file of the conversation's workspace
    assert "generate_image" not in writer.tools


def test_the_images_toolset_without_image_providers_stays_off_saying_why(tmp_path: Path) -> None:
    _, writer = build_profiles(load_config(_config(tmp_path, writer_tools="images"), {}))
    assert "generate_image" not in writer.tools
    assert "profiles[].image_providers" in writer.unavailable_toolsets["images"]


def test_image_providers_naming_an_unknown_provider_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, images="ghost"), {})
    assert "profiles[0].image_providers[0]: profile 'artist' names unknown provider 'ghost'" in (
        str(caught.value)
    )


def test_an_image_provider_must_speak_openai_wire(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, images="claude"), {})
    assert "profiles[0].image_providers[0]: provider 'claude' speaks anthropic_messages" in (
        str(caught.value)
    )


def test_closing_a_profile_closes_its_image_models_clients_too(tmp_path: Path) -> None:
    artist, writer = build_profiles(load_config(_config(tmp_path), {}))

    assert artist.images is not None
    assert artist.images in artist.clients  # what a shutdown or a reload's retirement closes
    assert writer.images is None
    assert writer.clients == writer.chains
