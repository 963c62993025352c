"""Skills reach the agent, against a real ``hermes-server serve`` process: a profile's
directory skill is named in the system prompt the model gets (the same bytes every request,
so the prefix stays cacheable), skill_view loads it, a sandboxed command runs its script at
``/skills/<name>``; a skill uploaded with the official SDK and one the agent wrote (after its
approval) are offered in the next session of the same key, never to another key."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families

from hermes_core.skills.format import skill_markdown
from hermes_core.tools.toolsets import sandbox_missing
from server.bootstrap import build_profiles
from server.config import ConfigError, load_config
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.config.test_config import run_check_config
from tests.server.served import (
    Served,
    answer,
    call,
    calls,
    script,
    sdk_client,
    serving,
    system_prompt,
    tool_results_of,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = "skills-upstream"
MODEL = "skilled-agent"
KEY = "sk-skills-alice-0123456789"
KEY_BOB = "sk-skills-bob-0123456789"
SKILL = "say-hello"
DESCRIPTION = "Says hello from a script; use it to greet."
BODY = "Run scripts/hello.py and repeat what it prints."
LISTED = f"- {SKILL}: {DESCRIPTION}"

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: alice}}
    - {{key: {key_bob}, principal: bob}}
  approval_timeout_seconds: 120
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [files, shell, code]
    approvals: {{shell: never, code: never}}
    skills: {{dirs: [{skills}]}}
    sandbox: {{timeout_seconds: 60, max_processes: 64, cpu_seconds: 30, sandbox_memory_mb: 512}}
"""


def _skills_dir(server: Served) -> Path:
    """The profile's skills directory (``skills.dirs``)."""
    return server.data_dir / "profile-skills"


def _config_file(server: Served) -> Path:
    return server.data_dir / "hermes.yaml"


@pytest.fixture(scope="module")
def skill_server(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("skill-server")
    skills = data / "profile-skills"
    folder = skills / SKILL
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(skill_markdown(SKILL, DESCRIPTION, BODY))
    (folder / "scripts" / "hello.py").write_text("print('hello from the skill')\n")
    config = CONFIG.format(
        data=data,
        key=KEY,
        key_bob=KEY_BOB,
        upstream=UPSTREAM,
        simulator=_simulator_server.base_url,
        model=MODEL,
        skills=skills,
    )
    with serving(data, config) as server:
        yield server


@pytest.fixture
async def alice(skill_server: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(skill_server.base_url, KEY) as client:
        yield client


@pytest.fixture
async def bob(skill_server: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(skill_server.base_url, KEY_BOB) as client:
        yield client


async def _metric(server: Served, name: str, **labels: str) -> float:
    """The value of the series ``name`` with ``labels`` on the server's /metrics (0: none)."""
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url) as client:
        text = (await client.get("/metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


async def _chat(
    client: AsyncOpenAI,
    text: str,
    session: str | None = None,
    *,
    more: tuple[dict[str, str], ...] = (),
) -> str:
    headers = {"x-hermes-session-id": session} if session else {}
    completion = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": text}, *more],  # type: ignore[list-item]
        extra_headers=headers,
    )
    return completion.choices[0].message.content or ""


async def test_the_profiles_skill_is_named_in_the_system_prompt_the_model_gets(
    skill_server: Served, simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    script(simulator, UPSTREAM, answer("Hi."))

    await _chat(alice, "hi")

    system = system_prompt(simulator, UPSTREAM)
    assert LISTED in system
    assert "skill_view" in system


async def test_the_system_prompt_with_skills_is_the_same_bytes_on_every_request(
    skill_server: Served, simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    script(simulator, UPSTREAM, answer("One."))
    await _chat(alice, "first")
    first = system_prompt(simulator, UPSTREAM)
    script(simulator, UPSTREAM, answer("Two."))
    await _chat(alice, "second")

    assert system_prompt(simulator, UPSTREAM) == first


async def test_skill_view_gives_the_model_the_skills_body_and_its_script(
    skill_server: Served, simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    views = await _metric(skill_server, "hermes_skill_views_total", profile=MODEL)
    script(simulator, UPSTREAM, calls(("skill_view", {"name": SKILL})), answer("Loaded."))

    assert await _chat(alice, "greet me") == "Loaded."

    (result,) = tool_results_of(simulator, UPSTREAM)
    assert BODY in result
    assert f"/skills/{SKILL}/scripts/hello.py" in result
    assert await _metric(skill_server, "hermes_skill_views_total", profile=MODEL) == views + 1


async def test_a_shell_command_runs_the_skills_script_at_its_sandbox_path(
    skill_server: Served, simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    if (reason := sandbox_missing()) is not None:
        pytest.skip(f"no sandbox here: {reason}")
    command = f"python3 /skills/{SKILL}/scripts/hello.py"
    script(simulator, UPSTREAM, call("shell", command=command), answer("Greeted."))

    assert await _chat(alice, "greet me", "shell-skill") == "Greeted."

    (result,) = tool_results_of(simulator, UPSTREAM)
    assert result.startswith("[exit code 0;")
    assert "hello from the skill" in result


async def test_a_command_cannot_change_a_skill_every_key_shares(
    skill_server: Served, simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    if (reason := sandbox_missing()) is not None:
        pytest.skip(f"no sandbox here: {reason}")
    skill_md = _skills_dir(skill_server) / SKILL / "SKILL.md"
    before = skill_md.read_bytes()
    attack = (
        f"echo hijacked > /skills/{SKILL}/SKILL.md; rm -f /skills/{SKILL}/scripts/hello.py; "
        f"touch /skills/{SKILL}/new.txt; ls /skills/{SKILL}"
    )
    script(simulator, UPSTREAM, call("shell", command=attack), answer("Tried."))

    assert await _chat(alice, "change the skill", "skill-attack") == "Tried."

    (result,) = tool_results_of(simulator, UPSTREAM)
    assert "Read-only file system" in result
    assert skill_md.read_bytes() == before
    assert (_skills_dir(skill_server) / SKILL / "scripts" / "hello.py").exists()
    assert not (_skills_dir(skill_server) / SKILL / "new.txt").exists()


async def test_a_skill_uploaded_with_the_sdk_is_offered_in_the_next_run(
    skill_server: Served, simulator: SimulatorServer, alice: AsyncOpenAI, bob: AsyncOpenAI
) -> None:
    markdown = skill_markdown("fold-maps", "Folds paper maps the right way.", "Fold twice.")
    await alice.skills.create(files=[("fold-maps/SKILL.md", io.BytesIO(markdown.encode()))])
    script(simulator, UPSTREAM, answer("Hi."))

    await _chat(alice, "hi")

    assert "- fold-maps: Folds paper maps the right way." in system_prompt(simulator, UPSTREAM)
    script(simulator, UPSTREAM, answer("Hi."))
    await _chat(bob, "hi")
    assert "fold-maps" not in system_prompt(simulator, UPSTREAM)


async def test_a_skill_the_agent_writes_is_asked_approved_then_offered_to_that_key_alone(
    skill_server: Served, simulator: SimulatorServer, alice: AsyncOpenAI, bob: AsyncOpenAI
) -> None:
    create = {
        "action": "create",
        "name": "brew-tea",
        "description": "Brews tea properly.",
        "body": "Boil water, then steep three minutes.",
    }
    script(simulator, UPSTREAM, calls(("skill_manage", create)), answer("unreached"))
    question = await _chat(alice, "remember how to brew tea", "brew")
    assert "brew-tea" in question
    assert "approve" in question

    script(simulator, UPSTREAM, answer("Kept."))
    said = await _chat(
        alice,
        "remember how to brew tea",
        "brew",
        more=({"role": "assistant", "content": question}, {"role": "user", "content": "approve"}),
    )
    assert said == "Kept."
    assert tool_results_of(simulator, UPSTREAM)[-1].startswith("Created the skill 'brew-tea'")
    created = await _metric(
        skill_server, "hermes_skills_created_total", profile=MODEL, origin="agent"
    )
    assert created == 1

    script(simulator, UPSTREAM, answer("Hi."))
    await _chat(alice, "hello again", "a-new-session")
    assert "- brew-tea: Brews tea properly." in system_prompt(simulator, UPSTREAM)
    script(simulator, UPSTREAM, answer("Hi."))
    await _chat(bob, "hello", "bobs-session")
    assert "brew-tea" not in system_prompt(simulator, UPSTREAM)


async def test_the_model_lists_the_profiles_own_skills(
    skill_server: Served, alice: AsyncOpenAI
) -> None:
    model = await alice.models.retrieve(MODEL)

    assert model.model_extra is not None
    hermes = model.model_extra["hermes"]
    assert hermes["skills"] == [{"name": SKILL, "description": DESCRIPTION}]
    assert {"skills_list", "skill_view", "skill_manage"} <= set(hermes["tools"])


def test_check_config_lists_the_profiles_skills_and_says_which_folder_is_broken(
    skill_server: Served, tmp_path: Path
) -> None:
    broken = tmp_path / "skills" / "broken"
    broken.mkdir(parents=True)
    (broken / "SKILL.md").write_text("no front matter here\n")
    config = (
        _config_file(skill_server)
        .read_text()
        .replace(
            f"dirs: [{_skills_dir(skill_server)}]",
            f"dirs: [{_skills_dir(skill_server)}, {tmp_path / 'skills'}]",
        )
    )
    path = tmp_path / "hermes.yaml"
    path.write_text(config)

    result = run_check_config(path)

    assert result.returncode == 0, result.stderr
    (skills,) = [line for line in result.stdout.splitlines() if line.strip().startswith("skills ")]
    assert f"{SKILL}; skill_manage approval: always" in skills
    assert f"{broken}" in result.stdout
    assert "BROKEN, left out: SKILL.md must start with a YAML front matter" in result.stdout


def test_a_profile_may_let_skill_manage_write_without_asking_or_turn_skills_off(
    skill_server: Served, tmp_path: Path
) -> None:
    text = _config_file(skill_server).read_text()
    never = text.replace(
        "{shell: never, code: never}", "{shell: never, code: never, skills: never}"
    )
    off = text.replace(
        f"skills: {{dirs: [{_skills_dir(skill_server)}]}}", "skills: {enabled: false}"
    )
    (tmp_path / "never.yaml").write_text(never)
    (tmp_path / "off.yaml").write_text(off)

    (writes,) = build_profiles(load_config(tmp_path / "never.yaml", {}))
    (plain,) = build_profiles(load_config(tmp_path / "off.yaml", {}))

    assert not writes.skills_approval
    assert not writes.asks_approval
    assert plain.skills is None
    assert "skills" not in plain.toolsets


def test_approvals_apply_to_skills_but_not_to_other_agent_level_toolsets(
    skill_server: Served, tmp_path: Path
) -> None:
    text = _config_file(skill_server).read_text()
    (tmp_path / "bad.yaml").write_text(text.replace("code: never}", "code: never, todo: never}"))

    with pytest.raises(ConfigError, match="unknown toolset 'todo'"):
        load_config(tmp_path / "bad.yaml", {})
