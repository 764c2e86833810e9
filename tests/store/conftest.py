"""The PostgreSQL server the store contract runs against: one per test session, torn down at its end."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from postgres_server import REQUIRE_ENV, PostgresServer, Unavailable, start


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A running PostgreSQL 15 on a free loopback port. Without one the test skips,
    unless ``TETHER_REQUIRE_POSTGRES`` is set (``make test`` sets it): then it fails."""
    try:
        server = start()
    except Unavailable as exc:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{exc} ({REQUIRE_ENV} is set)")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()
