"""The ``hermes-server`` command.

hermes-server serve    [--host 127.0.0.1] [--port 8000]   the agent server
hermes-server simulate [--host 127.0.0.1] [--port 9100]   the upstream LLM simulator
"""

from __future__ import annotations

import argparse
import logging

import uvicorn

from server.app import create_app
from server.settings import ServerSettings
from server.simulator import SimulatorState, create_simulator_app

log = logging.getLogger("hermes.cli")


def _serve(args: argparse.Namespace) -> int:
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = ServerSettings(**overrides)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        access_log=False,  # per-request logging belongs in metrics, off the hot path
    )
    return 0


def _simulate(args: argparse.Namespace) -> int:
    state = SimulatorState(min_cacheable_tokens=args.min_cacheable_tokens)
    root = f"http://{args.host}:{args.port}"
    log.info("upstream simulator: OpenAI base URL %s/v1, Anthropic base URL %s", root, root)
    uvicorn.run(
        create_simulator_app(state),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-server", description=__doc__.split("\n")[0])
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the OpenAI-compatible agent server")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000)")
    serve.set_defaults(handler=_serve)

    simulate = commands.add_parser("simulate", help="run the upstream LLM simulator")
    simulate.add_argument("--host", default="127.0.0.1")
    simulate.add_argument("--port", type=int, default=9100)
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
    args = build_parser().parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
