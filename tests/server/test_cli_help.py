"""``hermes-server --help`` and each command's ``--help`` say what the docs say: every command
and option docs/configuration.md's synopsis shows is there, each command describes itself, and
a worker count below one is refused by the command line rather than served as one."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from server.cli import build_parser

DOCS = Path(__file__).parents[2] / "docs" / "configuration.md"


def _parser(*command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in command:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = commands.choices[name]
    return parser


def _synopsis() -> list[tuple[list[str], list[str]]]:
    """(command words, options) of each ``hermes-server …`` line of the docs' synopsis."""
    block = DOCS.read_text().split("```sh\nhermes-server serve", 1)[1].split("```", 1)[0]
    lines = ["hermes-server serve" + block.splitlines()[0], *block.splitlines()[1:]]
    found = []
    for line in lines:
        usage = line.split("#", 1)[0]
        words = re.findall(r"(?<![-\w])([a-z][a-z-]*)(?=\s|$)", usage.removeprefix("hermes-server"))
        found.append((words, re.findall(r"--[a-z-]+", usage)))
    return found


def test_the_top_level_help_lists_every_command_and_where_settings_come_from() -> None:
    text = _parser().format_help()
    for command in ("serve", "check-config", "db", "simulate"):
        assert command in text
    assert "``" not in text  # no docstring markup
    assert "$HERMES_CONFIG" in text
    assert "docs/configuration.md" in text


@pytest.mark.parametrize(("command", "options"), _synopsis())
def test_each_documented_command_has_the_documented_options(
    command: list[str], options: list[str]
) -> None:
    parser = _parser(*command)
    assert parser.description  # what the command does, under its usage line
    text = parser.format_help()
    for option in options:
        assert option in text, (command, option)


def test_a_worker_count_below_one_is_a_command_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "--workers", "0"])
    assert exited.value.code == 2
    assert "--workers: 0 is not at least 1" in capsys.readouterr().err
