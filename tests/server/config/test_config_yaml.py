"""The YAML file is read strictly: a key given twice in one mapping is an error naming it and
its line (YAML keeps the last silently, so a second ``server:`` block dropped the first's
settings), while merge keys (``<<: *defaults``) still override as YAML means them to."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import ConfigError, load_config


def _load(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "hermes.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path, {})
    return raised.value.problems


def test_a_top_level_section_given_twice_is_an_error_naming_it_and_its_line(
    tmp_path: Path,
) -> None:
    problems = _load(
        tmp_path,
        "server:\n  port: 9000\nretention: {runs_days: 3}\nserver:\n  data_dir: /tmp/x\n",
    )
    assert problems == [
        f"{tmp_path / 'hermes.yaml'}: not valid YAML: the key 'server' appears twice in one "
        "mapping (the second would silently replace the first) (line 4, column 1)"
    ]


def test_a_setting_given_twice_deep_in_a_profile_is_an_error(tmp_path: Path) -> None:
    problems = _load(
        tmp_path,
        "profiles:\n  - id: a\n    providers: [simulator]\n    tools: [files]\n"
        "    tools: [shell]\n",
    )
    assert "the key 'tools' appears twice" in problems[0]
    assert "(line 5, column 5)" in problems[0]


def test_merge_keys_still_override_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text(
        "profiles:\n"
        "  - &base {id: a, providers: [simulator], max_iterations: 5}\n"
        "  - <<: *base\n"
        "    id: b\n"
    )
    config = load_config(path, {})
    assert [(p.id, p.max_iterations) for p in config.profiles] == [("a", 5), ("b", 5)]
