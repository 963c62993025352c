"""The search backend from the environment: a backend named (by ``HERMES_SEARCH_BACKEND`` or the
file) without its key or URL takes it from that vendor's usual variable, and one still missing
it is an error naming every place it may come from."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import ConfigError, load_config

BRAVE_KEY = "bsk-0123456789abcdefghijkl"


def test_a_backend_named_by_the_environment_takes_the_vendors_key_variable() -> None:
    config = load_config(
        None, {"HERMES_SEARCH_BACKEND": "brave", "BRAVE_SEARCH_API_KEY": BRAVE_KEY}
    )
    assert config.web.search is not None
    assert config.web.search.backend == "brave"
    assert config.web.search.api_key is not None
    assert config.web.search.api_key.get_secret_value() == BRAVE_KEY


def test_a_backend_named_by_the_file_takes_the_vendors_url_variable(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text("web:\n  search: {backend: searxng}\n")
    config = load_config(path, {"SEARXNG_URL": "http://searx.internal:8080"})
    assert config.web.search is not None
    assert config.web.search.url == "http://searx.internal:8080"


def test_another_vendors_variable_does_not_fill_the_named_backend() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, {"HERMES_SEARCH_BACKEND": "brave", "TAVILY_API_KEY": "tvly-0123456789"})
    assert raised.value.problems == [
        "web.search: the brave backend needs an api_key (web.search.api_key, or "
        "HERMES_SEARCH_API_KEY or BRAVE_SEARCH_API_KEY)"
    ]


def test_a_search_url_without_a_scheme_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, {"SEARXNG_URL": "searx.internal:8080"})
    assert raised.value.problems == [
        "web.search.url: must be an http:// or https:// URL (from SEARXNG_URL)"
    ]
