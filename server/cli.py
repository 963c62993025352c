"""The ``hermes-server`` command.

hermes-server serve        [--host 127.0.0.1] [--port 8000] [--config FILE]   the agent server
hermes-server check-config [--config FILE]          validate a configuration, print what it means
hermes-server simulate     [--host 127.0.0.1] [--port 9100]               the upstream LLM simulator
hermes-server db upgrade   [--config FILE]            apply the database's schema migrations
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from server.config import HermesConfig, LoadedConfig, Shadowed

# Each command imports what it needs when it runs, after main() turned the cyclic garbage
# collector off: a start allocates ~200,000 objects that live as long as the process and
# almost no garbage (~2,600 objects in cycles), and the collector's passes over them while
# the modules load cost serve ~0.1 s (#27). serve turns it back on once they are frozen
# (tune_garbage_collector); the other commands when they end.

log = logging.getLogger("hermes.cli")

EXIT_INVALID_CONFIG = 2  # as argparse uses for a bad command line
EXIT_DATABASE_DOWN = 75  # sysexits' EX_TEMPFAIL: a worker to start again later, not a refusal
LOG_FORMATS = ("text", "json")


def _config_path(args: argparse.Namespace, environ: Mapping[str, str]) -> Path | None:
    from server.config import CONFIG_ENV

    given: str | None = args.config or environ.get(CONFIG_ENV) or None
    return Path(given) if given else None


def _environ(args: argparse.Namespace) -> dict[str, str]:
    environ: dict[str, str] = dict(os.environ)
    # Command-line options win over the environment, so they are applied as its variables.
    if getattr(args, "host", None) is not None:
        environ["HERMES_HOST"] = args.host
    if getattr(args, "port", None) is not None:
        environ["HERMES_PORT"] = str(args.port)
    return environ


def _given_as(args: argparse.Namespace) -> dict[str, str]:
    """The options :func:`_environ` passes on as variables, by variable: a log naming what
    overrides the file names ``--port``, not a ``HERMES_PORT`` nobody set."""
    options = {"HERMES_HOST": ("--host", "host"), "HERMES_PORT": ("--port", "port")}
    return {
        variable: option
        for variable, (option, name) in options.items()
        if getattr(args, name, None) is not None
    }


def _load(args: argparse.Namespace) -> HermesConfig | None:
    """The configuration, or None after printing why it is invalid (never a traceback)."""
    loaded = _load_traced(args)
    return loaded.config if loaded is not None else None


def _load_traced(args: argparse.Namespace) -> LoadedConfig | None:
    """:func:`_load`, with the file's values the environment overrides."""
    from server.config import ConfigError, load

    environ = _environ(args)
    try:
        return load(_config_path(args, environ), environ)
    except ConfigError as exc:
        print(f"hermes-server: {exc}", file=sys.stderr)
        return None


SHUTDOWN_GRACE_SECONDS = 5


def _serve(args: argparse.Namespace) -> int:
    from server.config import config_warnings, shadowed_summary
    from server.process import workers
    from server.replicas.instance import instance_name
    from server.telemetry.json_logs import secrets_of, use_log_format

    log_format = _log_format(args.log_format, os.environ)
    if log_format is None:
        return EXIT_INVALID_CONFIG
    args.log_format = log_format  # as resolved, for uvicorn and the workers' command lines
    use_log_format(args.log_format)  # loading logs too (variables it ignores)
    loaded = _load_traced(args)
    if loaded is None:
        return EXIT_INVALID_CONFIG
    config = loaded.config
    use_log_format(args.log_format, secrets_of(config))
    for warning in config_warnings(config):
        log.warning("%s", warning)
    if loaded.shadowed and args.worker is None:  # a parent of workers says it once, for them
        log.warning("config: %s", shadowed_summary(loaded.shadowed, given_as=_given_as(args)))
    refused = _start_refusal(args, config)
    if refused is not None:
        print(f"hermes-server: {refused}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    if args.worker is not None:
        # Its parent checked the database at the first start; a worker started again after a
        # death may find it gone, and is told apart from a refusal (its parent backs off).
        problem = _database_problem(config)
        if problem is not None:
            print(f"hermes-server: {problem.line}", file=sys.stderr)
            return EXIT_DATABASE_DOWN if problem.down else EXIT_INVALID_CONFIG
    if args.worker is None and args.workers > 1:
        refused = workers.refusal(config, args.workers)
        if refused is not None:
            print(f"hermes-server: {refused}", file=sys.stderr)
            return EXIT_INVALID_CONFIG
        sock = workers.bind(config.server.host, config.server.port)
        log.info(
            "serving on %s:%s with %d workers", config.server.host, config.server.port, args.workers
        )
        gc.enable()  # the supervisor runs as long as its workers: it collects as usual
        return workers.supervise(_worker_args(args), args.workers, sock)
    if args.worker is not None:
        base = config.server.instance or instance_name(config.server.data_dir)
        config = workers.worker_instance(config, base, args.worker)
    return _serve_config(args, config, loaded.shadowed)


def _start_refusal(args: argparse.Namespace, config: HermesConfig) -> str | None:
    """Why ``serve`` must not start, in one line, checked before anything is served: a
    failure inside uvicorn's start-up would be a traceback. The parent of workers checks what
    they share once, for them."""
    if not config.server.api_keys and not config.server.loopback_only:
        return (
            f"refusing to listen on {config.server.host} without API keys; set "
            "HERMES_API_KEYS (or server.api_keys) or bind 127.0.0.1"
        )
    if not config.server.api_keys:
        log.warning("no API keys configured: serving loopback only, every caller is 'local'")
    refused = _directory_refusal(config)
    if refused is not None or args.worker is not None:
        return refused
    problem = _database_problem(config, migrate=args.workers > 1)
    refused = problem.line if problem is not None else None
    if refused is None and config.server.redis_url is not None:
        refused = _replica_refusal(config, args.workers)
    return refused


def _log_format(given: str | None, environ: Mapping[str, str]) -> str | None:
    """``--log-format``, else ``$HERMES_LOG_FORMAT``, else text; None after saying why the
    variable's value is not one (argparse checks only the option)."""
    from server.telemetry.json_logs import LOG_FORMAT_ENV

    if given is not None:
        return given
    value = environ.get(LOG_FORMAT_ENV, "").strip()
    if not value:  # empty counts as unset, as for every other variable
        return "text"
    if value.lower() in LOG_FORMATS:
        return value.lower()
    print(
        f"hermes-server: {LOG_FORMAT_ENV}: must be {' or '.join(LOG_FORMATS)}, not {value!r}",
        file=sys.stderr,
    )
    return None


def _directory_refusal(config: HermesConfig) -> str | None:
    """Why the server's directories cannot hold its files: ``data_dir`` (made now, its
    instance name, the SQLite database, the link secret), said before anything writes there
    (a read-only or foreign-owned volume, or a file in its place, ended the start with a
    traceback); the others, made as they are needed, must not be files."""
    server = config.server
    others = {
        "server.shared_dir": server.shared_dir,
        "server.workspaces_dir": server.resolved_workspaces_dir,
        "server.files.dir": server.resolved_files_dir,
    }
    for setting, directory in others.items():
        if directory is not None and directory.exists() and not directory.is_dir():
            return f"{setting}: {directory} is not a directory"
    return _data_dir_refusal(server.data_dir)


def _data_dir_refusal(directory: Path) -> str | None:
    if directory.exists() and not directory.is_dir():
        return f"server.data_dir: {directory} is not a directory"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"server.data_dir: cannot create {directory} ({error.strerror or error})"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"server.data_dir: cannot write in {directory} (permission denied)"
    return None


class DatabaseProblem(NamedTuple):
    line: str
    """What is wrong, in one line with the password masked."""
    down: bool
    """The database is out of reach or not taking connections now (it may be back soon), as
    opposed to refusing this server (its login, its schema)."""


def _database_problem(config: HermesConfig, *, migrate: bool = False) -> DatabaseProblem | None:
    """Why ``serve`` cannot start on its PostgreSQL (unreachable, refusing the login, a schema
    behind this release without ``migrate_on_start``). Asked here, before uvicorn: a failing
    start-up inside it is a traceback. SQLite is a file in ``data_dir``, checked already.

    ``migrate``: a schema behind is upgraded here, with ``migrate_on_start``: the parent of
    workers does it once for them, which would otherwise each run the migrations at once (and
    all but one fail, on PostgreSQL's catalogue)."""
    url = config.server.resolved_database_url
    if url.startswith("sqlite"):
        return None
    from sqlalchemy.exc import SQLAlchemyError

    from hermes_core.persistence.database import Database, SchemaOutOfDate
    from server.config.describe import mask_url

    async def check() -> None:
        db = Database(url)
        try:
            await db.ensure_schema(upgrade=False)
        except SchemaOutOfDate:
            if not config.server.migrate_on_start:
                raise  # else the start migrates it
            if migrate:
                await db.upgrade()
        finally:
            await db.close()

    try:
        asyncio.run(check())
    except SchemaOutOfDate as behind:
        return DatabaseProblem(f"server.database_url: {behind}", down=False)
    except (OSError, SQLAlchemyError, TimeoutError) as error:
        line = f"server.database_url: cannot use {mask_url(url)}: {_database_error(error)}"
        return DatabaseProblem(line, down=_database_down(error))
    return None


# PostgreSQL's error codes meaning "not now": a connection exception (class 08), the server
# shutting down or starting up, too many connections.
_NOT_NOW = ("57P01", "57P02", "57P03", "53300")


def _database_down(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached or take a connection now (a
    refused or timed-out connection, a server starting or shutting down), rather than that it
    refuses this server."""
    from sqlalchemy.exc import DBAPIError

    if isinstance(error, OSError | TimeoutError):
        return True
    why = error.orig if isinstance(error, DBAPIError) else error
    if isinstance(why, OSError | TimeoutError):
        return True
    code = str(getattr(why, "sqlstate", None) or "")
    return code.startswith("08") or code in _NOT_NOW


def _database_error(error: BaseException) -> str:
    """What went wrong, as the database said it (not SQLAlchemy's wrapping of it), with the
    configuration's secrets masked."""
    from sqlalchemy.exc import DBAPIError

    from server.telemetry.json_logs import mask

    why = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    return mask(str(why)) or type(why).__name__


def _replica_refusal(config: HermesConfig, workers: int) -> str | None:
    """Why this replica must not start, checked on Redis before anything else: its volume is
    not the others', or its name is taken, or Redis cannot be reached (one line, the URL
    without its password, never a traceback)."""
    from redis.exceptions import RedisError

    from server.config.describe import mask_url
    from server.telemetry.json_logs import mask

    try:
        return _shared_volume_refusal(config) or _instance_refusal(config, workers)
    except (RedisError, OSError) as error:
        assert config.server.redis_url is not None
        url = mask_url(config.server.redis_url.get_secret_value())
        why = mask(str(error)) or type(error).__name__
        return f"server.redis_url: cannot use Redis at {url}: {why}"


def _shared_volume_refusal(config: HermesConfig) -> str | None:
    """Why this replica must not join the others: its uploads and workspaces volume is not
    theirs (see server/replicas/shared_volume.py)."""
    from server.replicas.shared_volume import deployment_of, refusal_at_start

    assert config.server.redis_url is not None
    return asyncio.run(
        refusal_at_start(
            config.server.redis_url.get_secret_value(),
            config.server.resolved_shared_dir,
            lease_seconds=config.server.lease_seconds,
            deployment=deployment_of(config.server.resolved_database_url),
        )
    )


def _instance_refusal(config: HermesConfig, workers: int) -> str | None:
    """Why this replica must not start: another live replica runs under its name, or under a
    name one of its ``workers`` will take (see server/replicas/liveness.py)."""
    from server.process.workers import worker_name
    from server.replicas.instance import instance_name
    from server.replicas.liveness import refusal_at_start

    assert config.server.redis_url is not None
    instance = config.server.instance or instance_name(config.server.data_dir)
    names = [worker_name(instance, i) for i in range(1, workers + 1)] if workers > 1 else [instance]
    return asyncio.run(
        refusal_at_start(
            config.server.redis_url.get_secret_value(),
            names,
            lease_seconds=config.server.lease_seconds,
        )
    )


def _serve_config(
    args: argparse.Namespace, config: HermesConfig, shadowed: tuple[Shadowed, ...]
) -> int:
    import uvicorn

    from server.app import create_app
    from server.bootstrap import build_services, upstreams
    from server.deferred_providers import deferred_in, warm_up
    from server.http.connection_limits import HttpLimits, guarded_protocol
    from server.process import workers
    from server.process.reload import ConfigReloader
    from server.process.runtime import ExitAwareServer, tune_garbage_collector
    from server.telemetry.json_logs import uvicorn_log_config

    with upstreams(config) as running:
        server = running.server
        log.info("serving %s on %s:%s", ", ".join(running.model_ids), server.host, server.port)
        services = build_services(running)
        reloader = ConfigReloader(
            services,
            running,
            _config_path(args, os.environ),
            _environ(args),
            shadowed=shadowed,
            given_as=_given_as(args),
        )
        services.startup_hooks.append(reloader.start)
        # The SDKs of Anthropic and Responses providers load while the server answers.
        chains = [chain for profile in services.profiles for chain in profile.chains]

        def warm_up_providers() -> None:
            warm_up(deferred_in(chains))

        services.startup_hooks.append(warm_up_providers)
        app = create_app(services)
        tune_garbage_collector()
        limits = HttpLimits(
            head_timeout=server.head_timeout_seconds,
            max_head_bytes=server.max_header_bytes,
            body_idle_timeout=server.body_idle_timeout_seconds,
            body_min_bytes_per_second=server.body_min_bytes_per_second,
        )
        uvicorn_config = uvicorn.Config(
            app,
            host=server.host,
            port=server.port,
            log_level=args.log_level,
            # Per-request logging belongs in metrics, off the hot path, unless asked for.
            access_log=args.access_log,
            log_config=uvicorn_log_config(args.log_format),
            http=guarded_protocol(limits),
            timeout_keep_alive=int(server.keep_alive_seconds),
            # The drain already let the runs finish (server.drain_seconds): a connection still
            # open then (a reader of another replica's run, a client that will not hang up)
            # must not keep the process from exiting.
            timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        )
        sockets = [workers.listening_socket(args.listen_fd)] if args.listen_fd is not None else None
        try:
            ExitAwareServer(uvicorn_config, on_exit=services.runs.begin_exit).run(sockets=sockets)
        except SystemExit:  # its start failed: a name taken since the check is refused alike
            taken = services.cluster.taken if services.cluster is not None else None
            if taken is None:
                raise
            print(f"hermes-server: {taken}", file=sys.stderr)
            return EXIT_INVALID_CONFIG
    return 0


def _worker_args(args: argparse.Namespace) -> list[str]:
    """The command line of one worker: this one's, the listening socket aside."""
    command = ["--log-level", args.log_level, "serve", "--log-format", args.log_format]
    if args.access_log:
        command.append("--access-log")
    if args.config:
        command += ["--config", args.config]
    if args.host is not None:
        command += ["--host", args.host]
    if args.port is not None:
        command += ["--port", str(args.port)]
    return command


def _check_config(args: argparse.Namespace) -> int:
    from server.config import config_warnings, describe, shadowed_summary

    loaded = _load_traced(args)
    if loaded is None:
        return EXIT_INVALID_CONFIG
    config = loaded.config
    print(describe(config, source=_config_path(args, os.environ)), end="")
    if any(profile.mcp_servers for profile in config.profiles):
        from server.config.mcp_probe import probe_mcp_servers  # the MCP SDK, only here

        print("\nMCP servers (connected to now, to check them)")
        with open(os.devnull, "w") as quiet:  # the servers' own logs are not the report
            for line in asyncio.run(probe_mcp_servers(config, quiet)):
                print(f"  {line}")
    warnings = config_warnings(config)
    if loaded.shadowed:  # what the file says there is not what the server would run with
        warnings.append(shadowed_summary(loaded.shadowed))
    if warnings:
        print("\nwarnings")
        for warning in warnings:
            print(f"  - {warning}")
    return 0


def _db_upgrade(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from hermes_core.persistence import Database
    from server.telemetry.json_logs import secrets_of, use_log_format

    config = _load(args)
    if config is None:
        return EXIT_INVALID_CONFIG
    use_log_format("text", secrets_of(config))  # what it prints of an error is masked too
    db = Database(config.server.resolved_database_url)

    async def upgrade() -> str | None:
        try:
            await db.upgrade()
            return await db.current_revision()
        finally:
            await db.close()

    try:
        revision = asyncio.run(upgrade())
    except (OSError, SQLAlchemyError) as exc:
        # The URL may hold a password: name the database without it, and mask what it said.
        said = _database_error(exc)
        print(f"hermes-server: cannot upgrade {db.safe_url}: {said}", file=sys.stderr)
        return 1
    print(f"{db.safe_url}: schema at revision {revision}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    import uvicorn

    from server.process.runtime import tune_garbage_collector
    from server.simulator import SimulatorState, create_simulator_app

    state = SimulatorState(min_cacheable_tokens=args.min_cacheable_tokens)
    root = f"http://{args.host}:{args.port}"
    log.info("upstream simulator: OpenAI base URL %s/v1, Anthropic base URL %s", root, root)
    app = create_simulator_app(state)
    tune_garbage_collector()
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
    )
    return 0


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not between 0 and 65535")
    return port


def _workers(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"{count} is not at least 1")
    return count


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` says what it does, as the command list does."""
    return commands.add_parser(name, help=summary, description=summary[0].upper() + summary[1:])


def _add_config_option(parser: argparse.ArgumentParser) -> None:
    from server.config import CONFIG_ENV

    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help=f"YAML configuration file (default: ${CONFIG_ENV}, else the embedded defaults)",
    )


def build_parser() -> argparse.ArgumentParser:
    from server.config import CONFIG_ENV
    from server.telemetry.json_logs import LOG_FORMAT_ENV

    parser = argparse.ArgumentParser(
        prog="hermes-server",
        description="An OpenAI-compatible HTTP server whose model is a whole agent. "
        "It needs no configuration; settings come from the embedded defaults, then a YAML file "
        f"(--config FILE or ${CONFIG_ENV}), then HERMES_* environment variables, then "
        "--host/--port (docs/configuration.md).",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    commands = parser.add_subparsers(dest="command", required=True)

    serve = _command(
        commands,
        "serve",
        "run the OpenAI-compatible agent server (SIGHUP or a changed file reloads the "
        "configuration; SIGTERM drains)",
    )
    serve.add_argument(
        "--host",
        default=None,
        help="bind address, over $HERMES_HOST and server.host (default 127.0.0.1)",
    )
    serve.add_argument(
        "--port",
        type=_port,
        default=None,
        help="port, over $HERMES_PORT and server.port (default 8000)",
    )
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="worker processes (default 1); more need PostgreSQL and Redis (each is a replica)",
    )
    # Set by `serve --workers N` on the processes it starts: not for people.
    serve.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)
    serve.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=None,
        help=f"text, or one JSON object per line with the run's ids (default: ${LOG_FORMAT_ENV}"
        ", else text)",
    )
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="a line per HTTP request (off: metrics count them)",
    )
    _add_config_option(serve)
    serve.set_defaults(handler=_serve)

    check = _command(
        commands,
        "check-config",
        "validate a configuration and print what it resolves to, secrets masked (exit 2 and "
        "every problem when it is invalid)",
    )
    _add_config_option(check)
    check.set_defaults(handler=_check_config)

    database = _command(commands, "db", "database maintenance")
    db_commands = database.add_subparsers(dest="db_command", required=True)
    upgrade = _command(db_commands, "upgrade", "apply the database's schema migrations")
    _add_config_option(upgrade)
    upgrade.set_defaults(handler=_db_upgrade)

    simulate = _command(
        commands, "simulate", "run the upstream LLM simulator (OpenAI and Anthropic APIs)"
    )
    simulate.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    simulate.add_argument("--port", type=_port, default=9100, help="port (default 9100)")
    simulate.add_argument(
        "--min-cacheable-tokens",
        type=int,
        default=1024,
        help="prompt prefixes shorter than this are never cached (as on the real APIs)",
    )
    simulate.set_defaults(handler=_simulate)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # One INFO line per upstream request is noise in the log and costs CPU on the hot path.
    for chatty in ("httpx", "httpx2", "httpcore", "httpcore2"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    gc.disable()  # see the imports
    try:
        args = build_parser().parse_args(argv)
        handler = args.handler
        result: int = handler(args)
    finally:
        gc.enable()
    return result


if __name__ == "__main__":
    raise SystemExit(main())
