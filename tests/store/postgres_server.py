"""A throwaway PostgreSQL server for the tests and the bench: Debian's ``postgresql-15``, on a free loopback port.

``initdb`` a data directory in a fresh temporary directory, start the server
listening on 127.0.0.1 only (its unix socket inside the data directory), and
stop it and remove everything on ``stop()``. As root, the server runs as the
``postgres`` user (it refuses to run as root), which then owns the directory.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BIN = Path(os.environ.get("TETHER_PG_BIN", "/usr/lib/postgresql/15/bin"))
REQUIRE_ENV = "TETHER_REQUIRE_POSTGRES"


class Unavailable(Exception):
    """No PostgreSQL here (the binaries or psycopg are missing); the message says what to install."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    root: Path
    port: int
    as_user: list[str]

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres", **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}" + (f"?{query}" if query else "")

    def schema_url(self) -> str:
        """The url of a new, empty schema: each test gets tables of its own on the shared server."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f"CREATE SCHEMA {name}".encode())
        return self.url(options=f"-csearch_path%3D{name}")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                [*self.as_user, str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.root, ignore_errors=True)


def start() -> PostgresServer:
    """A running server; raises ``Unavailable`` when PostgreSQL or psycopg is not installed."""
    if not (BIN / "initdb").exists():
        raise Unavailable(f"no {BIN}/initdb: install Debian's postgresql-15 (apt-get install postgresql-15)")
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise Unavailable("psycopg is not installed: pip install -e '.[postgres]'") from None
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    if os.geteuid() == 0:  # the server refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres", "postgres")
    server = PostgresServer(root, free_port(), as_user)
    try:
        run = [*as_user, str(BIN / "initdb"), "-D", str(server.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        subprocess.run([*run, "--locale=C.UTF-8", "-N"], check=True, capture_output=True, timeout=120)
        options = f"-h 127.0.0.1 -p {server.port} -k {server.data} -c max_connections=200"
        pg_ctl = [*as_user, str(BIN / "pg_ctl"), "-D", str(server.data), "-l", str(root / "log"), "-w"]
        subprocess.run(
            [*pg_ctl, "-o", options, "start"],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        log = (root / "log").read_text(errors="replace") if (root / "log").exists() else ""
        server.stop()
        detail = exc.stderr.decode(errors="replace") if isinstance(exc, subprocess.CalledProcessError) else ""
        raise RuntimeError(f"PostgreSQL did not start: {exc}\n{detail}\n{log}") from exc
    return server


def running() -> Iterator[PostgresServer]:
    """A started server for a fixture to yield, stopped after; without one the test skips, unless
    ``TETHER_REQUIRE_POSTGRES`` is set (``make test`` sets it): then it fails."""
    import pytest

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
