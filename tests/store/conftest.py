"""The PostgreSQL server the store contract runs against: one per test session, torn down at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from postgres_server import PostgresServer, running


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A running PostgreSQL 15 on a free loopback port. Without one the test skips,
    unless ``TETHER_REQUIRE_POSTGRES`` is set (``make test`` sets it): then it fails."""
    yield from running()
