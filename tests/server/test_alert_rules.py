"""The alert rules (deploy/prometheus/hermes-server-rules.yml): their shape, and promtool's
check and unit tests (hermes-server-rules.test.yml).

promtool comes from Debian's ``prometheus`` package (``.ci/promtool`` installs just that
binary). Without it the promtool tests skip, except under ``HERMES_REQUIRE_PROMTOOL=1`` (set
by ``.ci/run``), where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = RULES_DIR / "hermes-server-rules.yml"
RULE_TESTS = RULES_DIR / "hermes-server-rules.test.yml"
SEVERITIES = frozenset({"critical", "warning"})


def _alerts() -> list[dict[str, Any]]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("HERMES_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is required (HERMES_REQUIRE_PROMTOOL=1) but not on PATH")
        pytest.skip("promtool is not installed (.ci/promtool installs it)")
    return found


def _run(*args: str) -> None:
    done = subprocess.run(
        [_promtool(), *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_says_how_bad_what_and_for_how_long() -> None:
    alerts = _alerts()
    assert alerts
    for alert in alerts:
        name = alert["alert"]
        assert name.startswith("Hermes"), name
        assert alert.get("for"), f"{name}: no `for:`, so one bad evaluation pages"
        assert alert["labels"]["severity"] in SEVERITIES, name
        assert alert["annotations"].keys() >= {"summary", "description"}, name


def test_every_alert_has_a_unit_test() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tested = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {alert["alert"] for alert in _alerts()} <= tested


def test_promtool_accepts_the_rules() -> None:
    _run("check", "rules", "--lint=all", "--lint-fatal", RULES.name)


def test_the_rules_fire_when_and_only_when_their_unit_tests_say() -> None:
    _run("test", "rules", RULE_TESTS.name)
