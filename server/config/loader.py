"""Loading a configuration: the YAML file, ``${VAR}`` substitution, then the environment.

Order of precedence, lowest first: the embedded defaults, the file, environment variables.
Everything is assembled into one plain dict and validated once by :class:`HermesConfig`, so a
value has the same rules wherever it came from; an error about a value that came from the
environment names the variable.

With no upstream configured anywhere the built-in simulator stands in, so that ``serve`` with
no configuration at all gives a working, offline server (on loopback; on an address others reach
a missing upstream is refused, unless ``HERMES_UPSTREAM=simulator`` asks for it).

Every variable read here may instead come from a file, as Docker and Kubernetes mount secrets:
``NAME_FILE`` holds the path whose content is ``NAME``'s value (``NAME`` wins when both are set).

A file value a variable overrides is recorded (:class:`Shadowed`): an operator who edits it sees
no effect, so ``serve`` names each such setting and its variable, at start and at every reload.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from server.config.schema import (
    DEFAULT_PROFILE_ID,
    PATTERN_HINTS,
    SIMULATOR_MODEL,
    SIMULATOR_PROVIDER,
    HermesConfig,
)

log = logging.getLogger(__name__)

CONFIG_ENV = "HERMES_CONFIG"
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"
DEFAULT_OPENAI_MODEL = "gpt-4.1"

# Server settings each settable by one environment variable (which wins over the file).
SERVER_ENV: dict[str, str] = {
    "HERMES_HOST": "host",
    "HERMES_PORT": "port",
    "HERMES_DATA_DIR": "data_dir",
    "HERMES_SHARED_DIR": "shared_dir",
    "HERMES_INSTANCE": "instance",
    "DATABASE_URL": "database_url",
    "REDIS_URL": "redis_url",
    "HERMES_LEASE_SECONDS": "lease_seconds",
    "HERMES_DRAIN_SECONDS": "drain_seconds",
    "HERMES_MAX_BODY_BYTES": "max_body_bytes",
    "HERMES_MAX_CONCURRENT_RUNS": "max_concurrent_runs",
    "HERMES_MAX_CONCURRENT_RUNS_PER_KEY": "max_concurrent_runs_per_key",
    "HERMES_STOP_ON_DISCONNECT": "stop_on_disconnect",
    "HERMES_MIGRATE_ON_START": "migrate_on_start",
    "HERMES_SESSION_BUSY": "session_busy",
    "HERMES_SESSION_WAIT_SECONDS": "session_wait_seconds",
    "HERMES_RESPONSES_MAX_COUNT": "responses_max_count",
    "HERMES_RESPONSES_MAX_AGE_DAYS": "responses_max_age_days",
}
API_KEYS_ENV = "HERMES_API_KEYS"
FILE_SUFFIX = "_FILE"
"""``NAME_FILE``: the path of a file holding ``NAME``'s value."""
UPSTREAM_ENV = "HERMES_UPSTREAM"
"""``simulator``: the built-in simulator on purpose, also on an address others reach (a demo)."""
WEB_ALLOW_ENV = "HERMES_WEB_ALLOW"
SEARCH_ENV = {
    "HERMES_SEARCH_BACKEND": "backend",
    "HERMES_SEARCH_URL": "url",
    "HERMES_SEARCH_API_KEY": "api_key",
}
# A search backend from the vendor's usual variable, when nothing else names one (first wins).
SEARCH_SHORTCUTS = (
    ("SEARXNG_URL", "searxng", "url"),
    ("BRAVE_SEARCH_API_KEY", "brave", "api_key"),
    ("TAVILY_API_KEY", "tavily", "api_key"),
)
_SHORTCUT_PREFIXES = ("HERMES_UPSTREAM_", "HERMES_ANTHROPIC_", "HERMES_OPENAI_")

_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
# A problem line that starts with the path of the field it is about, e.g. "profiles[0].id: ".
_LEADING_PATH = re.compile(r"^([A-Za-z_][\w.\[\]]*): ")


class ConfigError(Exception):
    """The configuration cannot be used; ``problems`` has one line per problem, each naming
    the field (or environment variable) at fault. Never contains a secret."""

    def __init__(self, problems: Sequence[str], *, source: Path | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" ({source})" if source is not None else ""
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid configuration{where}:\n{lines}")


@dataclasses.dataclass(frozen=True)
class Shadowed:
    """A setting the file gives a value that an environment variable overrides."""

    setting: str
    """Its path, as errors name it: ``server.api_keys``."""
    variable: str
    """The variable whose value is used instead: ``HERMES_API_KEYS``."""
    file_value: Any = dataclasses.field(repr=False, compare=False)
    """What the file says, to tell whether a reload's file changed it; never logged (it may be
    a key), hence out of ``repr``."""


@dataclasses.dataclass(frozen=True)
class LoadedConfig:
    """A validated configuration and the file's values the environment overrode in it."""

    config: HermesConfig
    shadowed: tuple[Shadowed, ...] = ()


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> HermesConfig:
    """Read ``path`` (if any), apply ``environ`` (default ``os.environ``) and validate.

    Raises :class:`ConfigError` listing every problem found.
    """
    return load(path, environ).config


def load(path: Path | None = None, environ: Mapping[str, str] | None = None) -> LoadedConfig:
    """:func:`load_config`, also saying which of the file's values the environment overrode."""
    env = os.environ if environ is None else environ
    raw = _read_file(path) if path is not None else {}
    problems: list[str] = []
    raw = _substitute(raw, env, "", problems)
    if problems:
        raise ConfigError(problems, source=path)
    origins: dict[str, str] = {}
    shadowed: list[Shadowed] = []
    _apply_server_env(raw, env, origins, shadowed)
    _apply_web_env(raw, env, origins, shadowed)
    asked = _env(env, UPSTREAM_ENV)
    if asked not in (None, SIMULATOR_PROVIDER):
        problems.append(
            f"{UPSTREAM_ENV}: only 'simulator' is understood (name a real upstream with "
            "HERMES_UPSTREAM_BASE_URL and HERMES_UPSTREAM_MODEL)"
        )
    simulated = _fill_providers(raw, env, origins, problems)
    if problems:
        raise ConfigError(problems, source=path)
    _fill_default_profile(raw)
    try:
        config = HermesConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, origins), source=path) from None
    if simulated and asked is None and not config.server.loopback_only:
        # Loopback, the simulator makes `serve` work on a fresh machine; on an address others
        # reach, a missing upstream is a mistake to say at start, not a demo to serve.
        raise ConfigError(
            [
                f"no upstream model configured, on a server listening on {config.server.host}: "
                "set HERMES_UPSTREAM_BASE_URL and HERMES_UPSTREAM_MODEL (or ANTHROPIC_API_KEY "
                "or OPENAI_API_KEY, or providers: in the config file), or "
                f"{UPSTREAM_ENV}=simulator to serve the built-in simulator on purpose"
            ],
            source=path,
        )
    return LoadedConfig(config, tuple(shadowed))


def shadowed_summary(
    shadowed: Sequence[Shadowed],
    edited: Collection[str] = (),
    given_as: Mapping[str, str] | None = None,
) -> str:
    """One line naming each overridden setting and its variable (never a value: it may be a
    secret); the settings in ``edited`` are marked as changed in the file to no effect.
    ``given_as`` names what really set a variable (``serve`` passes ``--port`` as
    ``HERMES_PORT``)."""
    edit = "; edited in the file, not applied"
    aliases = given_as or {}
    names = ", ".join(
        f"{s.setting} ({aliases.get(s.variable, s.variable)}{edit if s.setting in edited else ''})"
        for s in shadowed
    )
    return f"the environment overrides the config file's {names}: the file's values are not used"


def edited_shadowed(before: Sequence[Shadowed], after: Sequence[Shadowed]) -> list[str]:
    """The overridden settings of ``after`` whose file value differs from ``before``'s (or that
    the file did not set before): edits an operator made that the environment cancels."""
    previous = {s.setting: s.file_value for s in before}
    return [
        s.setting for s in after if s.setting not in previous or previous[s.setting] != s.file_value
    ]


# --- the file -----------------------------------------------------------------------------------


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"], source=path) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot be read ({exc.strerror})"], source=path) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"], source=path) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no objects built
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_problem(path, exc)], source=path) from None
    if data is None:  # an empty file (or only comments) is a valid, empty configuration
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{path}: the top level must be a mapping (server, providers, profiles)"],
            source=path,
        )
    return data


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a key given twice in one mapping: YAML keeps the
    last silently, so a second ``server:`` block would drop every setting of the first."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults` is meant to be overridden
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: the constructor says so itself
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"the key {key!r} appears twice in one mapping (the second would silently "
                "replace the first)",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    # str(exc) quotes the offending line, which may hold a key: report the position only.
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return (
            f"{path}: not valid YAML: {exc.problem} "
            f"(line {mark.line + 1}, column {mark.column + 1})"
        )
    return f"{path}: not valid YAML"


def _substitute(value: Any, environ: Mapping[str, str], where: str, problems: list[str]) -> Any:
    """``value`` with every ``${VAR}`` / ``${VAR:-default}`` in its strings replaced.

    Done on the parsed tree, not the text, so a value can never change the YAML's structure.
    ``$${`` stands for a literal ``${``.
    """
    if isinstance(value, dict):
        return {
            key: _substitute(item, environ, _join(where, str(key)), problems)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _substitute(item, environ, f"{where}[{index}]", problems)
            for index, item in enumerate(value)
        ]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return "${"
        reference = _VARIABLE.fullmatch(match.group(1))
        if reference is None:
            problems.append(
                f"{where or 'config'}: {match.group(0)!r} is not a valid reference; write "
                "${NAME} or ${NAME:-default} (and $${ for a literal ${)"
            )
            return ""
        name, default = reference.group(1), reference.group(2)
        found = environ.get(name)
        if found:
            return found
        from_file = _env_file(environ, f"{name}{FILE_SUFFIX}")  # a mounted secret
        if from_file is not None:
            return from_file
        if default is not None:  # as in the shell, ":-" also covers a set-but-empty variable
            return default
        if found is None:
            problems.append(
                f"{where or 'config'}: environment variable {name} is not set "
                f"(write ${{{name}:-default}} to give a default)"
            )
        return ""

    return _REFERENCE.sub(replace, value)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# --- the environment ----------------------------------------------------------------------------


def _env(environ: Mapping[str, str], name: str) -> str | None:
    # An empty variable counts as unset: `HERMES_PORT=` in a compose file means "no override".
    value = environ.get(name, "").strip()
    if value:
        return value
    return _env_file(environ, f"{name}{FILE_SUFFIX}")


def _env_file(environ: Mapping[str, str], variable: str) -> str | None:
    """The content of the file ``variable`` names (a mounted secret), stripped; None when the
    variable is unset. A file that cannot be read stops the load, naming the variable and
    the path, never the content."""
    where = environ.get(variable, "").strip()
    if not where:
        return None
    try:
        content = Path(where).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{variable}: cannot read {where} ({exc.strerror})"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{variable}: {where} is not UTF-8 text"]) from None
    return content.strip() or None


def _override(
    section: dict[str, Any],
    key: str,
    value: Any,
    where: str,
    variable: str,
    origins: dict[str, str],
    shadowed: list[Shadowed],
) -> None:
    """``section[key] = value`` from ``variable``, recording a value of the file it replaces."""
    if section.get(key) is not None:
        shadowed.append(Shadowed(where, variable, section[key]))
    section[key] = value
    origins[where] = variable


def _apply_server_env(
    raw: dict[str, Any],
    environ: Mapping[str, str],
    origins: dict[str, str],
    shadowed: list[Shadowed],
) -> None:
    if raw.get("server") is None:
        raw["server"] = {}
    server = raw["server"]
    if not isinstance(server, dict):
        return  # validation reports it
    for variable, name in SERVER_ENV.items():
        value = _env(environ, variable)
        if value is not None:
            _override(server, name, value, f"server.{name}", variable, origins, shadowed)
    keys = _env(environ, API_KEYS_ENV)
    if keys is not None:
        keyring = parse_api_keys(keys)
        _override(server, "api_keys", keyring, "server.api_keys", API_KEYS_ENV, origins, shadowed)


def _apply_web_env(
    raw: dict[str, Any],
    environ: Mapping[str, str],
    origins: dict[str, str],
    shadowed: list[Shadowed],
) -> None:
    """``HERMES_WEB_ALLOW`` (comma-separated) and the search backend from the environment:
    ``HERMES_SEARCH_*`` override the file; a vendor variable only fills a gap."""
    if raw.get("web") is None:
        raw["web"] = {}
    web = raw["web"]
    if not isinstance(web, dict):
        return  # validation reports it
    allow = _env(environ, WEB_ALLOW_ENV)
    if allow is not None:
        entries = [entry.strip() for entry in allow.split(",") if entry.strip()]
        _override(web, "allow", entries, "web.allow", WEB_ALLOW_ENV, origins, shadowed)
    _apply_search_env(web, environ, origins, shadowed)


def _apply_search_env(
    web: dict[str, Any],
    environ: Mapping[str, str],
    origins: dict[str, str],
    shadowed: list[Shadowed],
) -> None:
    """``web.search`` with ``HERMES_SEARCH_*`` over the file's, then the vendor's variable
    (``BRAVE_SEARCH_API_KEY``…) for what the backend named still lacks, or naming the backend
    when nothing does."""
    search = web.get("search")
    overrides = {f: v for var, f in SEARCH_ENV.items() if (v := _env(environ, var)) is not None}
    if overrides:
        search = web["search"] = dict(search) if isinstance(search, dict) else {}
        for variable, name in SEARCH_ENV.items():
            if name in overrides:
                where = f"web.search.{name}"
                _override(search, name, overrides[name], where, variable, origins, shadowed)
    if isinstance(search, dict):
        # A named backend still missing its key (or URL) takes it from the vendor's variable:
        # `HERMES_SEARCH_BACKEND=brave` beside `BRAVE_SEARCH_API_KEY`.
        for variable, backend, field in SEARCH_SHORTCUTS:
            value = _env(environ, variable)
            if search.get("backend") == backend and not search.get(field) and value is not None:
                search[field] = value
                origins[f"web.search.{field}"] = variable
        return
    if search is not None:
        return
    for variable, backend, field in SEARCH_SHORTCUTS:
        value = _env(environ, variable)
        if value is not None:
            web["search"] = {"backend": backend, field: value}
            origins[f"web.search.{field}"] = variable
            return


def parse_api_keys(value: str) -> list[dict[str, str]]:
    """``HERMES_API_KEYS``: comma-separated ``key`` or ``principal:key`` entries."""
    entries: list[dict[str, str]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        principal, colon, key = item.partition(":")
        if colon:
            entries.append({"principal": principal.strip(), "key": key.strip()})
        else:
            entries.append({"key": item})
    return entries


def _fill_providers(
    raw: dict[str, Any], environ: Mapping[str, str], origins: dict[str, str], problems: list[str]
) -> bool:
    """Providers from the environment shortcuts, or the simulator, when the file has none;
    True when the simulator stands in for an upstream nobody configured."""
    if raw.get("providers"):
        # Vendor keys are often set for other tools; only our own variables deserve a note.
        ignored = sorted(v for v in environ if v.startswith(_SHORTCUT_PREFIXES) and environ[v])
        if ignored:
            log.info(
                "the config file defines providers; ignoring %s (refer to them from the file)",
                ", ".join(ignored),
            )
        _add_named_simulator(raw)
        return False
    shortcuts, shortcut_origins = _shortcut_providers(environ, problems)
    if shortcuts:
        raw["providers"] = shortcuts
        origins.update(shortcut_origins)
    else:
        raw["providers"] = [_simulator_provider()]
    _add_named_simulator(raw)
    # A profile naming the simulator asked for it; otherwise it stands in for what is missing.
    return not shortcuts and SIMULATOR_PROVIDER not in _named_by_profiles(raw)


def _add_named_simulator(raw: dict[str, Any]) -> None:
    providers = raw["providers"]
    if not isinstance(providers, list):
        return
    # A profile may always name the simulator, e.g. for a demo profile beside real ones.
    named = {p.get("name") for p in providers if isinstance(p, dict)}
    if SIMULATOR_PROVIDER in _named_by_profiles(raw) and SIMULATOR_PROVIDER not in named:
        providers.append(_simulator_provider())


def _named_by_profiles(raw: dict[str, Any]) -> set[str]:
    """The provider names the file's profiles use."""
    profiles = raw.get("profiles")
    if not isinstance(profiles, list):
        return set()
    return {
        name
        for profile in profiles
        if isinstance(profile, dict)
        for key in ("providers", "auxiliary_providers", "vision_providers")
        if isinstance(profile.get(key), list)
        for name in profile[key]
        if isinstance(name, str)  # anything else is reported by validation
    }


def _simulator_provider() -> dict[str, Any]:
    # base_url stays empty here: `serve` starts the simulator and fills it in.
    return {"name": SIMULATOR_PROVIDER, "model": SIMULATOR_MODEL, "api_mode": "chat_completions"}


def _shortcut_providers(
    environ: Mapping[str, str], problems: list[str]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Upstreams configured by environment variables alone, in fallback order."""
    providers: list[dict[str, Any]] = []
    origins: dict[str, str] = {}

    def add(provider: dict[str, Any], sources: dict[str, str]) -> None:
        for field, variable in sources.items():
            origins[f"providers[{len(providers)}].{field}"] = variable
        providers.append(provider)

    base_url = _env(environ, "HERMES_UPSTREAM_BASE_URL")
    model = _env(environ, "HERMES_UPSTREAM_MODEL")
    key = _env(environ, "HERMES_UPSTREAM_API_KEY")
    mode = _env(environ, "HERMES_UPSTREAM_API_MODE")
    if base_url and model:
        add(
            {
                "name": "upstream",
                "model": model,
                "base_url": base_url,
                "api_key": key,
                "api_mode": mode,
            },
            {
                "model": "HERMES_UPSTREAM_MODEL",
                "base_url": "HERMES_UPSTREAM_BASE_URL",
                "api_key": "HERMES_UPSTREAM_API_KEY",
                "api_mode": "HERMES_UPSTREAM_API_MODE",
            },
        )
    elif base_url or model or key or mode:
        missing = "HERMES_UPSTREAM_MODEL" if base_url else "HERMES_UPSTREAM_BASE_URL"
        problems.append(
            f"{missing}: not set, but other HERMES_UPSTREAM_* variables are; an "
            "OpenAI-compatible upstream needs HERMES_UPSTREAM_BASE_URL and HERMES_UPSTREAM_MODEL"
        )
    for vendor, default_model in (
        ("anthropic", DEFAULT_ANTHROPIC_MODEL),
        ("openai", DEFAULT_OPENAI_MODEL),
    ):
        key_var, model_var = f"{vendor.upper()}_API_KEY", f"HERMES_{vendor.upper()}_MODEL"
        vendor_key, vendor_model = _env(environ, key_var), _env(environ, model_var)
        if vendor_key:
            add(
                {
                    "name": vendor,
                    "provider": vendor,
                    "model": vendor_model or default_model,
                    "api_key": vendor_key,
                },
                {"model": model_var, "api_key": key_var},
            )
        elif vendor_model:
            problems.append(f"{key_var}: not set, but {model_var} is")
    return providers, origins


def _fill_default_profile(raw: dict[str, Any]) -> None:
    if raw.get("profiles"):
        return
    providers = raw.get("providers")
    if not isinstance(providers, list):
        return
    names = [p["name"] for p in providers if isinstance(p, dict) and isinstance(p.get("name"), str)]
    simulated = names == [SIMULATOR_PROVIDER]
    raw["profiles"] = [
        {
            "id": DEFAULT_PROFILE_ID,
            "description": (
                "The built-in simulator (no upstream configured)"
                if simulated
                else "The default agent"
            ),
            "providers": names,
        }
    ]


# --- error messages -----------------------------------------------------------------------------

_FRIENDLY = {
    "extra_forbidden": "unknown field (check its spelling)",
    "missing": "required, but missing",
}


def _problems(exc: ValidationError, origins: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    for error in exc.errors(include_url=False, include_input=False):
        location = _format_location(error["loc"])
        context = error.get("ctx", {})
        if error["type"] == "value_error":
            message = str(context.get("error", error["msg"]))
        elif error["type"] == "string_pattern_mismatch":
            message = PATTERN_HINTS.get(str(context.get("pattern")), error["msg"])
        else:
            message = _FRIENDLY.get(error["type"], error["msg"])
        for line in message.splitlines():
            leading = _LEADING_PATH.match(line)
            if leading:  # the validator named a field below `location`
                path = _join(location, leading.group(1))
                text = line[leading.end() :]
            else:
                path, text = location, line
            problems.append(f"{path or 'config'}: {text}{_origin(path, origins)}")
    return problems


def _format_location(location: tuple[int | str, ...]) -> str:
    text = ""
    for part in location:
        text = f"{text}[{part}]" if isinstance(part, int) else _join(text, part)
    return text


def _origin(path: str, origins: Mapping[str, str]) -> str:
    for prefix, variable in origins.items():
        if path == prefix or path.startswith((f"{prefix}.", f"{prefix}[")):
            return f" (from {variable})"
    return ""
