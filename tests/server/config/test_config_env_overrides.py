"""Which of the file's values an environment variable overrides: each is named with its
variable, so that ``serve`` can say so; a variable filling what the file leaves out overrides
nothing, and a value is never part of what is said."""

from __future__ import annotations

from pathlib import Path

from server.config import Shadowed, edited_shadowed, load, shadowed_summary
from tests.server.config.test_config import check_config

FILE_KEY = "sk-file-0123456789abcdef"
ENV_KEY = "sk-env-0123456789abcdef"

FILE = """\
server:
  api_keys: [{{principal: alice, key: {key}}}]
  max_concurrent_runs: {runs}
web:
  allow: [wiki.corp.example]
  search: {{backend: searxng, url: "http://searx.file:8080"}}
"""


def _write(path: Path, runs: int = 70) -> Path:
    path.write_text(FILE.format(key=FILE_KEY, runs=runs))
    return path


def test_a_file_value_an_environment_variable_overrides_is_named_with_its_variable(
    tmp_path: Path,
) -> None:
    environ = {
        "HERMES_API_KEYS": f"alice:{ENV_KEY}",
        "HERMES_MAX_CONCURRENT_RUNS": "50",
        "HERMES_WEB_ALLOW": "10.0.0.0/8",
        "HERMES_SEARCH_URL": "http://searx.env:8080",
        "HERMES_SESSION_BUSY": "reject",  # the file leaves it out: nothing overridden
    }
    loaded = load(_write(tmp_path / "hermes.yaml"), environ)
    assert [(s.setting, s.variable) for s in loaded.shadowed] == [
        ("server.max_concurrent_runs", "HERMES_MAX_CONCURRENT_RUNS"),
        ("server.api_keys", "HERMES_API_KEYS"),
        ("web.allow", "HERMES_WEB_ALLOW"),
        ("web.search.url", "HERMES_SEARCH_URL"),
    ]
    assert loaded.config.server.max_concurrent_runs == 50
    assert loaded.config.server.session_busy == "reject"


def test_the_summary_of_overrides_names_settings_and_variables_never_values(
    tmp_path: Path,
) -> None:
    environ = {"HERMES_API_KEYS": f"alice:{ENV_KEY}", "HERMES_PORT": "8123"}
    path = tmp_path / "hermes.yaml"
    path.write_text(f"server:\n  port: 8000\n  api_keys: [{{principal: a, key: {FILE_KEY}}}]\n")
    loaded = load(path, environ)
    summary = shadowed_summary(loaded.shadowed, given_as={"HERMES_PORT": "--port"})
    assert summary == (
        "the environment overrides the config file's server.port (--port), "
        "server.api_keys (HERMES_API_KEYS): the file's values are not used"
    )
    assert FILE_KEY not in repr(loaded.shadowed)


def test_an_edit_to_an_overridden_value_is_told_from_an_unchanged_one(tmp_path: Path) -> None:
    environ = {"HERMES_MAX_CONCURRENT_RUNS": "50", "HERMES_WEB_ALLOW": "10.0.0.0/8"}
    path = tmp_path / "hermes.yaml"
    before = load(_write(path, runs=70), environ).shadowed
    after = load(_write(path, runs=90), environ).shadowed
    assert edited_shadowed(before, after) == ["server.max_concurrent_runs"]
    assert edited_shadowed((), after) == ["server.max_concurrent_runs", "web.allow"]
    assert edited_shadowed(after, after) == []
    marked = shadowed_summary(after, ["server.max_concurrent_runs"])
    assert "server.max_concurrent_runs (HERMES_MAX_CONCURRENT_RUNS; edited in the file" in marked


def test_a_variable_without_a_file_value_overrides_nothing() -> None:
    loaded = load(None, {"HERMES_MAX_CONCURRENT_RUNS": "50", "HERMES_WEB_ALLOW": "10.0.0.0/8"})
    assert loaded.shadowed == ()
    assert loaded.config.server.max_concurrent_runs == 50


def test_shadowed_values_compare_by_setting_and_variable_only() -> None:
    assert Shadowed("server.port", "HERMES_PORT", 1) == Shadowed("server.port", "HERMES_PORT", 2)


def test_check_config_warns_of_the_file_values_the_environment_overrides(tmp_path: Path) -> None:
    path = _write(tmp_path / "hermes.yaml")
    result = check_config(path, HERMES_API_KEYS=f"alice:{ENV_KEY}")
    assert result.returncode == 0, result.stderr
    assert (
        "  - the environment overrides the config file's server.api_keys (HERMES_API_KEYS): "
        "the file's values are not used"
    ) in result.stdout
