"""Fixtures: a seeded tickets DB per test, a FakeServer as the model, the app served by uvicorn.

``api`` is the usual client, with its ``FakeServer`` in ``api.model`` (set
``api.model.script`` before starting a run).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from server_harness import SECRET, Api, fake_model_factory, run_uvicorn

from tether.testing.fake_server import FakeServer
from tickets_app.db import TicketsDB
from tickets_app.seed_data import seed
from tickets_app.settings import Settings


@pytest.fixture(scope="session")
def seeded_tickets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One seeded file, copied per test: argon2 hashing four passwords is the slow part of seeding."""
    path = tmp_path_factory.mktemp("seed") / "tickets.db"
    with TicketsDB(path) as db:
        seed(db)
    return path


@pytest.fixture
def tickets_path(tmp_path: Path, seeded_tickets: Path) -> Path:
    path = tmp_path / "tickets.db"
    shutil.copyfile(seeded_tickets, path)  # closed after seeding: the WAL is folded into the file
    return path


@pytest.fixture
def settings(tmp_path: Path, tickets_path: Path) -> Settings:
    return Settings(tickets_db=tickets_path, run_db=tmp_path / "runs.db", jwt_secret=SECRET)


@pytest.fixture
def model_server() -> Iterator[FakeServer]:
    with FakeServer() as server:
        yield server


@pytest.fixture
async def api(settings: Settings, model_server: FakeServer) -> AsyncIterator[Api]:
    settings = replace(settings, model_factory=fake_model_factory(model_server))
    with run_uvicorn(settings) as origin:
        async with aiohttp.ClientSession() as session:
            yield Api(origin, model_server, settings, session)
