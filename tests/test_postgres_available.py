"""The PostgreSQL that the store's tests run against is really there, or knowingly absent."""

from __future__ import annotations

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

from tests.postgres import postgres_url, require_postgres


# Under the store runs' marker: `make fast`, which leaves those out, would start a cluster (~6 s)
# for this test alone; `make test` runs it with them.
@pytest.mark.postgres
async def test_postgres_answers() -> None:
    url = postgres_url()
    if url is None:
        if require_postgres():
            pytest.fail(
                "HERMES_REQUIRE_POSTGRES=1 but no PostgreSQL: set HERMES_TEST_POSTGRES_URL "
                "or install PostgreSQL"
            )
        pytest.skip("no PostgreSQL here")
    # asyncpg takes the libpq form of SQLAlchemy's postgresql+asyncpg:// URL.
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    connection = await asyncpg.connect(dsn)
    try:
        assert await connection.fetchval("select 1") == 1
    finally:
        await connection.close()
