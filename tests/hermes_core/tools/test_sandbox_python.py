"""Commands' Python: the data environment by default, a profile's own when it names one —
mounted read-only where the sandbox's unprivileged user can run it — and ``check-config``
saying what it offers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_core.tools.sandbox import (
    SandboxLimits,
    SandboxPolicy,
    run_command,
    sandbox_unavailable_reason,
)
from hermes_core.tools.sandbox_python import environment_contents, python_executable
from tests.documents import require_data_python
from tests.server.config.test_config import check_config, write

LIMITS = SandboxLimits(timeout_seconds=30, max_output_bytes=10_000)


@pytest.fixture(scope="module", autouse=True)
def _sandbox_here() -> None:
    reason = sandbox_unavailable_reason()
    if reason is not None:
        if os.environ.get("HERMES_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox is required here but unavailable: {reason}")
        pytest.skip(f"no sandbox here: {reason}")


def run(command: str, workspace: Path, policy: SandboxPolicy) -> str:
    result = asyncio.run(
        run_command(["/bin/sh", "-c", command], workspace=workspace, limits=LIMITS, policy=policy)
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_python3_in_the_sandbox_is_the_data_environment_with_matplotlib_headless(
    tmp_path: Path,
) -> None:
    python = require_data_python()

    shown = run(
        "command -v python3; echo $MPLBACKEND; python3 -c 'import pandas, scipy, docx, pptx'",
        tmp_path / "workspace",
        SandboxPolicy(),
    )

    assert shown.splitlines() == [str(python), "Agg"]
    assert python_executable() == str(python)


def test_a_profiles_own_environment_outside_usr_is_what_commands_run(tmp_path: Path) -> None:
    own = tmp_path / "deep" / "envs" / "analysis"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(own)], check=True)
    os.chmod(tmp_path, 0o700)  # its parents need not be open on the host: they are mounted

    shown = run(
        "python3 -c 'import sys; print(sys.prefix)'; touch \"$(dirname $(command -v python3))/x\""
        " 2>/dev/null || echo read-only",
        tmp_path / "workspace",
        SandboxPolicy(python=own),
    )

    assert shown.splitlines() == [str(own), "read-only"]


def test_check_config_lists_the_interpreter_and_its_packages(tmp_path: Path) -> None:
    python = require_data_python()
    config = write(
        tmp_path, "profiles:\n  - id: analyst\n    providers: [simulator]\n    tools: [code]\n"
    )

    result = check_config(config, PATH=os.environ["PATH"])

    assert result.returncode == 0, result.stderr
    version = environment_contents().version
    assert f"python              {python} (Python {version})" in result.stdout
    packages = next(line for line in result.stdout.splitlines() if "packages" in line)
    for name in ("matplotlib", "numpy", "pandas", "pypdf", "python_docx", "scipy"):
        assert f"{name} " in packages


def test_check_config_says_when_a_named_environment_is_missing(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "profiles:\n  - id: analyst\n    providers: [simulator]\n    tools: [code]\n"
        "    sandbox: {python: /nowhere/env}\n",
    )

    result = check_config(config, PATH=os.environ["PATH"])

    assert result.returncode == 0, result.stderr
    assert "environment       MISSING: no bin/python3 in /nowhere/env" in result.stdout
