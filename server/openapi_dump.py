"""Write (or, with --check, verify) the committed OpenAPI document generated from the app."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from server.app import create_app
from server.services import Services


def render() -> str:
    return json.dumps(create_app(Services(profiles=())).openapi(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--check", action="store_true", help="fail when the file is stale")
    args = parser.parse_args(argv)
    current = render()
    if args.check:
        if not args.path.exists() or args.path.read_text() != current:
            print(f"{args.path} is stale: run `make openapi` and commit it.", file=sys.stderr)
            return 1
        return 0
    args.path.write_text(current)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
