"""Run hermes-server in its own process for benchmarks: one profile, upstream = a simulator URL.

python -m bench._serve --upstream http://127.0.0.1:9100 --port 8123
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import uvicorn
from pydantic import SecretStr

from hermes_core.persistence import sqlite_url
from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.skills.shelf import DirectorySkills
from server.app import create_app
from server.http.connection_limits import HttpLimits, guarded_protocol
from server.process.runtime import tune_garbage_collector
from server.profiles import Profile
from server.runs.manager import RunManager
from server.services import Services

BENCH_MODEL = "bench-upstream"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--database-url",
        default=None,
        help="where runs and transcripts are saved (default: a SQLite file, as `serve` does)",
    )
    parser.add_argument(
        "--no-database", action="store_true", help="keep nothing (to measure what saving costs)"
    )
    parser.add_argument(
        "--max-runs-per-key", type=int, default=4096, help="runs one caller may have at once"
    )
    parser.add_argument(
        "--skills",
        action="store_true",
        help="offer skills as a configured profile does (the key's library; skill_manage asks)",
    )
    args = parser.parse_args()
    database_url = args.database_url or sqlite_url(Path(tempfile.mkdtemp()) / "hermes.db")
    if args.no_database:
        database_url = None
    provider = create_provider(
        ProviderConfig(
            name="sim",
            model=BENCH_MODEL,
            api_mode="chat_completions",
            base_url=args.upstream + "/v1",
            api_key=SecretStr("bench"),
        )
    )
    services = Services(
        profiles=[
            Profile(
                id="hermes-agent",
                provider=provider,
                skills=DirectorySkills() if args.skills else None,
            )
        ],
        runs=RunManager(max_runs=4096, max_runs_per_owner=args.max_runs_per_key),
        database_url=database_url,
    )
    app = create_app(services)
    tune_garbage_collector()  # as `hermes-server serve` does
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        http=guarded_protocol(HttpLimits()),  # as `hermes-server serve` does
    )


if __name__ == "__main__":
    main()
