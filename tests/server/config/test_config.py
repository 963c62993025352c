"""Configuration: the YAML file, ${VAR} substitution, environment overrides, validation
messages, the masked description, and the ``check-config`` command (in this process, and once
as a real process for its exit status)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import pytest

from hermes_core.tools.agent_tools import ALWAYS_ON_TOOLS
from hermes_core.tools.toolsets import sandbox_missing
from server import cli
from server.bootstrap import build_services
from server.config import (
    SIMULATOR_PROVIDER,
    ConfigError,
    HermesConfig,
    describe,
    load_config,
)
from server.config.loader import DEFAULT_ANTHROPIC_MODEL

REPO = Path(__file__).parents[3]
OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"
CLIENT_KEY = "hk-client-key-0123456789abcdef"

TWO_PROVIDERS = """
server:
  port: 9000
  api_keys:
    - principal: alice
      key: ${ALICE_KEY}
providers:
  - name: claude
    provider: anthropic
    model: claude-sonnet-4-5
    api_key: ${ANTHROPIC_KEY}
  - name: gateway
    model: gpt-4.1-mini
    base_url: https://gateway.example/v1
    api_key_env: GATEWAY_KEY
profiles:
  - id: hermes-agent
    description: General agent
    providers: [claude, gateway]
    auxiliary_providers: [gateway]
    instructions: Be brief.
    tools: [files, todo]
    max_iterations: 40
    cache_ttl: 1h
  - id: hermes-webui
    providers: [gateway]
    openwebui: true
"""
TWO_PROVIDERS_ENV = {"ALICE_KEY": CLIENT_KEY, "ANTHROPIC_KEY": ANTHROPIC_KEY}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hermes.yaml"
    path.write_text(text)
    return path


def problems_of(path: Path | None, environ: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ)
    return caught.value.problems


# --- defaults and environment-only upstreams ---------------------------------------------------


def test_nothing_configured_serves_the_simulator_under_one_profile() -> None:
    config = load_config(None, {})

    assert config.uses_simulator
    assert [p.name for p in config.providers] == [SIMULATOR_PROVIDER]
    assert config.providers[0].base_url is None  # filled in when serve starts the simulator
    assert config.model_ids == ["hermes-agent"]
    assert config.profiles[0].providers == [SIMULATOR_PROVIDER]
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8000)
    assert config.server.data_dir == Path("data")
    assert config.server.resolved_database_url == "sqlite+aiosqlite:///data/hermes.db"
    assert config.server.stop_on_disconnect is True
    assert config.server.api_keys == []


def test_env_only_openai_compatible_upstream() -> None:
    config = load_config(
        None,
        {
            "HERMES_UPSTREAM_BASE_URL": "http://localhost:11434/v1",
            "HERMES_UPSTREAM_API_KEY": OPENAI_KEY,
            "HERMES_UPSTREAM_MODEL": "llama3.1",
        },
    )

    assert not config.uses_simulator
    (provider,) = config.providers
    assert (provider.name, provider.model, provider.base_url) == (
        "upstream",
        "llama3.1",
        "http://localhost:11434/v1",
    )
    assert provider.api_key is not None
    assert provider.api_key.get_secret_value() == OPENAI_KEY
    assert provider.resolved_api_mode == "chat_completions"
    assert config.profiles[0].id == "hermes-agent"
    assert config.profiles[0].providers == ["upstream"]


def test_env_only_upstream_api_mode_can_be_chosen() -> None:
    config = load_config(
        None,
        {
            "HERMES_UPSTREAM_BASE_URL": "https://proxy.example/v1",
            "HERMES_UPSTREAM_MODEL": "gpt-5",
            "HERMES_UPSTREAM_API_MODE": "codex_responses",
        },
    )
    assert config.providers[0].resolved_api_mode == "codex_responses"


def test_env_only_anthropic_uses_a_default_model() -> None:
    config = load_config(None, {"ANTHROPIC_API_KEY": ANTHROPIC_KEY})

    (provider,) = config.providers
    assert (provider.name, provider.model) == ("anthropic", DEFAULT_ANTHROPIC_MODEL)
    assert provider.resolved_api_mode == "anthropic_messages"
    assert config.profiles[0].providers == ["anthropic"]


def test_several_env_upstreams_form_one_fallback_chain() -> None:
    config = load_config(
        None,
        {
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "HERMES_ANTHROPIC_MODEL": "claude-opus-4-1",
            "OPENAI_API_KEY": OPENAI_KEY,
            "HERMES_OPENAI_MODEL": "gpt-4.1-mini",
        },
    )
    assert [(p.name, p.model) for p in config.providers] == [
        ("anthropic", "claude-opus-4-1"),
        ("openai", "gpt-4.1-mini"),
    ]
    assert config.profiles[0].providers == ["anthropic", "openai"]


def test_an_incomplete_upstream_in_the_environment_names_what_is_missing() -> None:
    problems = problems_of(None, {"HERMES_UPSTREAM_BASE_URL": "http://localhost:8080/v1"})
    assert len(problems) == 1
    assert problems[0].startswith("HERMES_UPSTREAM_MODEL: not set")


# --- the file -----------------------------------------------------------------------------------


def test_file_with_two_providers_a_fallback_chain_and_two_profiles(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TWO_PROVIDERS), TWO_PROVIDERS_ENV)

    assert not config.uses_simulator
    assert config.server.port == 9000
    assert [(k.principal, k.key.get_secret_value()) for k in config.server.api_keys] == [
        ("alice", CLIENT_KEY)
    ]
    assert [p.name for p in config.providers] == ["claude", "gateway"]
    assert config.provider("gateway").api_key_env == "GATEWAY_KEY"
    agent = config.profile("hermes-agent")
    webui = config.profile("hermes-webui")
    assert agent is not None
    assert webui is not None
    assert [p.name for p in config.chain(agent)] == ["claude", "gateway"]
    assert [p.name for p in config.chain(agent, auxiliary=True)] == ["gateway"]
    assert agent.enabled_tools == (*ALWAYS_ON_TOOLS, "files")
    assert (agent.cache_ttl, agent.max_iterations, agent.openwebui) == ("1h", 40, False)
    assert agent.agent_config().instructions == "Be brief."
    assert [p.name for p in config.chain(webui, auxiliary=True)] == ["gateway"]
    assert (webui.cache_ttl, webui.openwebui) == ("5m", True)


def test_file_providers_without_profiles_get_the_default_profile(tmp_path: Path) -> None:
    path = write(tmp_path, "providers:\n  - {name: a, model: m1}\n  - {name: b, model: m2}\n")
    config = load_config(path, {"ANTHROPIC_API_KEY": ANTHROPIC_KEY})

    # The file's providers win: the environment shortcut adds nothing.
    assert [p.name for p in config.providers] == ["a", "b"]
    assert [(p.id, p.providers) for p in config.profiles] == [("hermes-agent", ["a", "b"])]


def test_a_profile_may_name_the_simulator_beside_real_providers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "providers: [{name: real, model: m}]\n"
        "profiles:\n  - {id: prod, providers: [real]}\n  - {id: demo, providers: [simulator]}\n",
    )
    config = load_config(path, {})
    assert config.uses_simulator
    started = config.with_simulator_base_url("http://127.0.0.1:9100")
    assert started.provider(SIMULATOR_PROVIDER).base_url == "http://127.0.0.1:9100/v1"
    assert started.provider("real").base_url is None


def test_var_and_var_with_default_are_substituted(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "server:\n  host: ${BIND:-0.0.0.0}\n  port: ${PORT}\n"
        "profiles:\n  - id: ${PROFILE_ID:-fallback-id}\n    providers: [simulator]\n"
        "    instructions: 'Run $${HOME}/bin/${TOOL} as ${EMPTY:-nobody}.'\n",
    )
    config = load_config(path, {"PORT": "8123", "TOOL": "fmt", "EMPTY": ""})

    assert (config.server.host, config.server.port) == ("0.0.0.0", 8123)
    assert config.model_ids == ["fallback-id"]
    assert config.profiles[0].instructions == "Run ${HOME}/bin/fmt as nobody."


def test_an_unset_variable_without_default_is_an_error_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "providers:\n  - name: a\n    model: m\n    api_key: ${MISSING_KEY}\n")

    assert problems_of(path, {}) == [
        "providers[0].api_key: environment variable MISSING_KEY is not set "
        "(write ${MISSING_KEY:-default} to give a default)"
    ]


def test_environment_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "server:\n  host: 0.0.0.0\n  port: 9000\n  data_dir: /srv/from-file\n"
        "  stop_on_disconnect: true\n  api_keys: [{principal: file, key: file-key-0123456789}]\n",
    )
    config = load_config(
        path,
        {
            "HERMES_HOST": "127.0.0.2",
            "HERMES_PORT": "9001",
            "HERMES_DATA_DIR": "/srv/from-env",
            "HERMES_STOP_ON_DISCONNECT": "false",
            "HERMES_MAX_CONCURRENT_RUNS": "10",
            "HERMES_MAX_CONCURRENT_RUNS_PER_KEY": "2",
            "HERMES_API_KEYS": f"alice:{CLIENT_KEY}, bare-key-0123456789",
            "DATABASE_URL": "postgresql+asyncpg://hermes:pw@db/hermes",
            "HERMES_MIGRATE_ON_START": "yes",
            "HERMES_SESSION_BUSY": "refuse",
            "HERMES_SESSION_WAIT_SECONDS": "2.5",
            "HERMES_RESPONSES_MAX_COUNT": "500",
            "HERMES_RESPONSES_MAX_AGE_DAYS": "7",
        },
    )
    server = config.server
    assert (server.migrate_on_start, server.session_busy, server.session_wait_seconds) == (
        True,
        "refuse",
        2.5,
    )
    assert (server.responses_max_count, server.responses_max_age_days) == (500, 7.0)
    assert (server.host, server.port, server.data_dir) == ("127.0.0.2", 9001, Path("/srv/from-env"))
    assert server.stop_on_disconnect is False
    assert (server.max_concurrent_runs, server.max_concurrent_runs_per_key) == (10, 2)
    assert server.resolved_database_url == "postgresql+asyncpg://hermes:pw@db/hermes"
    principals = [k.principal for k in server.api_keys]
    assert principals[0] == "alice"
    assert principals[1].startswith("key-")  # derived from the key, stable across restarts
    assert (
        principals[1]
        == load_config(None, {"HERMES_API_KEYS": "bare-key-0123456789"})
        .server.api_keys[0]
        .principal
    )


def test_the_data_dir_moves_the_default_database(tmp_path: Path) -> None:
    # An empty database_url (e.g. from ${DATABASE_URL:-}) means the default SQLite file.
    path = write(tmp_path, "server: {database_url: '${DATABASE_URL:-}'}\n")
    config = load_config(path, {"HERMES_DATA_DIR": "/var/lib/hermes"})
    assert config.server.resolved_database_url == "sqlite+aiosqlite:////var/lib/hermes/hermes.db"


# --- invalid configurations ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "providers: [{name: a, model: m}]\nprofiles: [{id: x, providers: [a, nope]}]\n",
            "profiles[0].providers[1]: profile 'x' names unknown provider 'nope' (defined: a)",
        ),
        (
            "profiles:\n  - {id: twin, providers: [simulator]}\n"
            "  - {id: twin, providers: [simulator]}\n",
            "profiles[1].id: duplicate profile id 'twin'",
        ),
        (
            "providers: [{name: a, model: m}, {name: a, model: n}]\n",
            "providers[1].name: duplicate provider 'a'",
        ),
        ("server: {port: 70000}\n", "server.port: Input should be less than or equal to 65535"),
        ("server: {prot: 8000}\n", "server.prot: unknown field (check its spelling)"),
        ("profiles: [{id: x, providers: []}]\n", "profiles[0].providers: List should have"),
        (
            "profiles: [{id: x, providers: [simulator], cache_ttl: 2h}]\n",
            "profiles[0].cache_ttl: Input should be '5m' or '1h'",
        ),
        (
            "server: {max_concurrent_runs: 2, max_concurrent_runs_per_key: 3}\n",
            "server.max_concurrent_runs_per_key: must not exceed max_concurrent_runs (3 > 2)",
        ),
        ("providers: [{name: a}]\n", "providers[0].model: required, but missing"),
        (
            "profiles: [{id: 'has space', providers: [simulator]}]\n",
            "profiles[0].id: must start with a letter or digit and hold only letters",
        ),
        ("- just\n- a list\n", "the top level must be a mapping"),
        (
            "profiles: [{id: x, providers: [simulator], tools: [files, browser]}]\n",
            "profiles[0].tools: unknown toolset 'browser' (known: files, shell, code,",
        ),
        (
            "profiles: [{id: x, providers: [simulator], approvals: {memory: always}}]\n",
            "profiles[0].approvals: unknown toolset 'memory' (approvals apply to: files, shell",
        ),
        (
            "profiles: [{id: x, providers: [simulator], approvals: {shell: sometimes}}]\n",
            "profiles[0].approvals.shell: Input should be 'never', 'dangerous' or 'always'",
        ),
        (
            "server: {api_keys: [{key: k-0123456789, profiles: [nope]}]}\n",
            "server.api_keys[0].profiles[0]: unknown profile 'nope' (defined: hermes-agent)",
        ),
    ],
)
def test_invalid_configurations_name_the_field_at_fault(
    tmp_path: Path, text: str, expected: str
) -> None:
    problems = problems_of(write(tmp_path, text), {})
    assert any(expected in problem for problem in problems), problems


def test_an_invalid_value_from_the_environment_names_the_variable() -> None:
    problems = problems_of(None, {"HERMES_PORT": "99999"})
    assert problems == [
        "server.port: Input should be less than or equal to 65535 (from HERMES_PORT)"
    ]


def test_a_repeated_client_key_is_reported_without_showing_it() -> None:
    problems = problems_of(None, {"HERMES_API_KEYS": f"a:{CLIENT_KEY},b:{CLIENT_KEY}"})
    assert problems == ["server.api_keys[1]: the same key is listed twice (from HERMES_API_KEYS)"]


def test_a_yaml_syntax_error_gives_its_position_but_not_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, f"providers:\n  - name: a\n    api_key: {OPENAI_KEY}: [\n")
    (problem,) = problems_of(path, {})
    assert "not valid YAML" in problem
    assert "line 3" in problem
    assert OPENAI_KEY not in problem


# --- what it resolves to --------------------------------------------------------------------------


def test_describe_never_shows_a_secret(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        TWO_PROVIDERS
        + "  - id: with-command\n    providers: [cmd]\n"
        + "  - id: short-key\n    providers: [short]\n",
    )
    path.write_text(
        path.read_text().replace(
            "profiles:",
            "  - {name: cmd, model: m, api_key_command: 'vault read -token=tok-SECRET-1 x'}\n"
            "  - {name: short, model: m, api_key: tiny-secret}\n"
            "profiles:",
        )
    )
    environ = {
        **TWO_PROVIDERS_ENV,
        "DATABASE_URL": "postgresql+asyncpg://hermes:db-password-9@db/h",
    }
    text = describe(load_config(path, environ))

    for secret in (CLIENT_KEY, ANTHROPIC_KEY, "tok-SECRET-1", "tiny-secret", "db-password-9"):
        assert secret not in text
    assert f"alice ({CLIENT_KEY[:3]}…{CLIENT_KEY[-4:]})" in text
    assert "postgresql+asyncpg://hermes:***@db/h" in text
    assert "hermes-agent — General agent" in text
    assert "claude → gateway" in text


def test_a_repr_never_shows_a_secret(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TWO_PROVIDERS), TWO_PROVIDERS_ENV)
    assert CLIENT_KEY not in repr(config)
    assert ANTHROPIC_KEY not in repr(config)


def test_services_are_built_from_the_configuration(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TWO_PROVIDERS), TWO_PROVIDERS_ENV)
    services = build_services(config)

    assert [p.id for p in services.profiles] == ["hermes-agent", "hermes-webui"]
    assert [p.openwebui for p in services.profiles] == [False, True]
    principal = services.keyring.authenticate(f"Bearer {CLIENT_KEY}")
    assert principal is not None
    assert principal.name == "alice"
    assert services.keyring.authenticate("Bearer wrong") is None


def test_a_key_can_be_restricted_to_some_profiles(tmp_path: Path) -> None:
    text = (
        "server:\n  api_keys:\n"
        "    - {principal: ops, key: k-ops-0123456789, profiles: [hermes-agent]}\n"
        "    - {principal: all, key: k-all-0123456789}\n"
        "profiles:\n  - {id: hermes-agent, providers: [simulator]}\n"
        "  - {id: hermes-admin, providers: [simulator]}\n"
    )
    services = build_services(load_config(write(tmp_path, text), {}))
    ops = services.keyring.authenticate("Bearer k-ops-0123456789")
    anyone = services.keyring.authenticate("Bearer k-all-0123456789")
    assert ops is not None
    assert anyone is not None
    assert (ops.may_use("hermes-agent"), ops.may_use("hermes-admin")) == (True, False)
    assert anyone.may_use("hermes-admin")


# --- hermes-server check-config -----------------------------------------------------------------


def _environ_of_a_fresh_shell(**environ: str) -> dict[str, str]:
    """This process's variables without those that configure the server, plus ``environ``."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HERMES_", "ANTHROPIC_", "OPENAI_")) and k != "DATABASE_URL"
    }
    return {**inherited, **environ}


def run_check_config(path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    """``hermes-server check-config`` as a real process (~1.5 s of CPU importing the server)."""
    return subprocess.run(
        [sys.executable, "-m", "server.cli", "check-config", "--config", str(path)],
        cwd=REPO,
        env=_environ_of_a_fresh_shell(**environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def check_config(path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    """The same command's ``main`` in this process, where the server is imported already: what
    it prints and returns (the process around it is run_check_config's test)."""
    argv = ["check-config", "--config", str(path)]
    out, err = io.StringIO(), io.StringIO()
    # main sets up logging as a process's first act does, so what it logs reaches the stderr
    # read here as it would a terminal's (pytest's own handlers set aside meanwhile); later
    # tests get this process's logging back.
    loggers = [logging.getLogger(name) for name in ("", "httpx", "httpx2", "httpcore", "httpcore2")]
    levels, handlers = [logger.level for logger in loggers], logging.root.handlers[:]
    logging.root.handlers.clear()
    try:
        with (
            mock.patch.dict(os.environ, _environ_of_a_fresh_shell(**environ), clear=True),
            redirect_stdout(out),
            redirect_stderr(err),
        ):
            status = cli.main(argv)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        logging.root.handlers[:] = handlers
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def test_check_config_prints_the_resolved_configuration(tmp_path: Path) -> None:
    result = check_config(write(tmp_path, TWO_PROVIDERS), **TWO_PROVIDERS_ENV)

    assert result.returncode == 0, result.stderr
    assert "hermes-agent — General agent" in result.stdout
    assert "hermes-webui" in result.stdout
    assert "provider gateway: environment variable GATEWAY_KEY is not set" in result.stdout
    for secret in (CLIENT_KEY, ANTHROPIC_KEY):
        assert secret not in result.stdout + result.stderr


def test_check_config_says_how_command_sandboxes_are_isolated(tmp_path: Path) -> None:
    text = """\
providers: [{name: sim, model: m, api_mode: chat_completions, base_url: "http://127.0.0.1:9/v1"}]
profiles: [{id: agent, providers: [sim], tools: [shell]}]
"""
    if sandbox_missing() is not None:
        pytest.skip(f"no sandbox here: {sandbox_missing()}")
    result = check_config(write(tmp_path, text))

    assert result.returncode == 0, result.stderr
    line = next(row for row in result.stdout.splitlines() if row.strip().startswith("isolation"))
    assert "cgroup" in line  # "cgroup v…" in force, or "no cgroups (why)"
    assert "user" in line


def test_check_config_rejects_an_invalid_file_with_exit_code_2(tmp_path: Path) -> None:
    text = TWO_PROVIDERS.replace("providers: [gateway]", "providers: [gateway, missing]")
    result = run_check_config(write(tmp_path, text), **TWO_PROVIDERS_ENV)

    assert result.returncode == 2
    assert result.stdout == ""
    assert "profiles[1].providers[1]: profile 'hermes-webui' names unknown provider" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    for secret in (CLIENT_KEY, ANTHROPIC_KEY):
        assert secret not in result.stderr


def test_loaded_configuration_round_trips_through_its_model(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TWO_PROVIDERS), TWO_PROVIDERS_ENV)
    assert HermesConfig.model_validate(config.model_dump()) == config


def test_upstream_variables_are_ignored_when_the_file_defines_providers(tmp_path: Path) -> None:
    path = write(tmp_path, "providers: [{name: a, model: m}]\n")
    # Incomplete on its own, but the file's providers make it irrelevant: no error.
    config = load_config(path, {"HERMES_ANTHROPIC_MODEL": "claude-opus-4-1"})
    assert [p.name for p in config.providers] == ["a"]


def test_the_search_backend_and_allow_list_come_from_the_environment() -> None:
    config = load_config(
        environ={
            "HERMES_WEB_ALLOW": "10.0.0.0/8, wiki.corp.example",
            "HERMES_SEARCH_BACKEND": "brave",
            "HERMES_SEARCH_API_KEY": "brave-key-0123456789",
        }
    )
    assert config.web.allow == ["10.0.0.0/8", "wiki.corp.example"]
    assert config.web.search is not None
    assert config.web.search.backend == "brave"
    described = describe(config)
    assert "brave at the vendor's API" in described
    assert "brave-key-0123456789" not in described


def test_a_vendor_variable_names_a_search_backend_when_nothing_else_does() -> None:
    config = load_config(environ={"SEARXNG_URL": "http://searx.internal:8080"})
    assert config.web.search is not None
    assert config.web.search.backend == "searxng"
    assert config.web.search.url == "http://searx.internal:8080"


def test_a_search_backend_missing_what_it_needs_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text("web:\n  search: {backend: tavily}\n")
    with pytest.raises(ConfigError, match=r"web\.search.*api_key"):
        load_config(path, environ={})


@pytest.mark.slow
def test_check_config_connects_to_each_mcp_server_and_says_which_is_down(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text(
        f"""
providers: [{{name: sim, provider: simulator, model: x}}]
profiles:
  - id: agent
    providers: [sim]
    mcp_servers:
      - name: workshop
        command: {sys.executable}
        args: ["-m", "tests.mcp_servers.workshop", "stdio", "--token", "do-not-print-me"]
        cwd: {REPO}
      - name: ghost
        command: /nonexistent/mcp-server
        connect_timeout_seconds: 2
"""
    )
    result = run_check_config(path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "agent/workshop (stdio): up, " in out
    assert "add, whoami" in out
    assert "agent/ghost (stdio): DOWN: command not found: /nonexistent/mcp-server" in out
    assert "do-not-print-me" not in out


def test_a_redis_url_is_described_without_its_password() -> None:
    config = load_config(environ={"REDIS_URL": "redis://:hunter2-secret@cache.internal:6379/0"})
    assert config.server.redis_url is not None
    described = describe(config)
    assert "cache.internal" in described
    assert "hunter2-secret" not in described


def test_check_config_shows_trusted_keys_budgets_prices_and_retention(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text(
        """
server:
  api_keys:
    - {principal: desk, key: sk-desk-0123456789, trusted_front_end: true,
       end_user_budget: {tokens_per_day: 5000}}
    - {principal: ops, key: sk-ops-0123456789, admin: true}
limits: {runs_per_user: 2, budget: {cost_per_month_usd: 40}}
prices: {my-model: {input: 1, output: 2}}
retention: {sessions_days: 90, files_days: 7}
"""
    )
    described = describe(load_config(path, {}))
    assert "trusted front ends  desk" in described
    assert "admin keys          ops" in described
    assert "runs per end user   2" in described
    assert "budget of desk      40 USD/month; each end user: 5000 tokens/day" in described
    assert "prices              my-model (over the built-in)" in described
    assert "retention           sessions 90 d, files 7 d" in described
