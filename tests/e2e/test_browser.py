"""The web page, end to end: a real server, a scripted model, headless Chromium driven by Playwright.

The server is the real app (``tickets_app.app.create_app``) under uvicorn on
a free loopback port (``run_uvicorn`` from tests/server/server_harness.py),
over a freshly seeded tickets database; the model is a
``FakeServer`` speaking OpenAI's wire format. ``browser.mjs`` (Node,
playwright-core, Debian's Chromium) signs in as alice, asks about her ticket,
asks to close it, signs in as carol in a second context, approves, and
checks alice's run finishes. Python then checks the tickets database: the
ticket was closed, exactly once.

Needs, once per machine (CI too)::

    apt-get update && apt-get install -y chromium
    npm ci --prefix tests/e2e        # or: npm install --prefix tests/e2e

Without them the test skips, unless TETHER_REQUIRE_BROWSER is set: then it fails.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chromium import CHROMIUM, require_browser

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "browser.mjs"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def _browser_available() -> None:
    require_browser("browser e2e")


# ----------------------------------------------------------------- the scripted model


def _ticket_for(username: str) -> tuple[str, str]:
    """An open ticket of ``username`` from the seed data: (id, title)."""
    from tickets_app.seed_data import TICKETS

    for t in TICKETS:
        if t.reporter == username and t.status != "closed":
            return t.id, t.title
    raise AssertionError(f"the seed data has no open ticket of {username}")


def support_model(ticket_id: str) -> Any:
    """A responder for FakeServer: look the ticket up and answer, or close it and say so.

    Stateless, from the request's transcript, so the order in which the
    browser's runs reach the model does not matter.
    """
    from tether.testing import text, tool_calls

    def respond(request: dict[str, Any]) -> Any:
        messages = request.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "user":
            prompt = str(last.get("content") or "").lower()
            tool = "close_ticket" if "close" in prompt else "get_ticket"
            call_id = f"call_{uuid.uuid4().hex[:16]}"
            return tool_calls([(call_id, tool, json.dumps({"ticket_id": ticket_id}))], latency=0.3)
        if last.get("role") == "tool":
            calls = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
            tool = calls.get(last.get("tool_call_id"), "?")
            envelope = json.loads(last.get("content") or "{}")
            if not envelope.get("ok"):
                return text(f"Sorry, {tool} failed: {envelope.get('error', {}).get('message')}", latency=0.2)
            result = envelope["result"]
            if tool == "get_ticket":
                answer = f"Your ticket {result['id']} is “{result['title']}”; its status is {result['status']}."
                return text(answer, latency=0.2)
            return text(f"Done: ticket {result['ticket_id']} is {result['status']}.", latency=0.2)
        return text("I did not follow that.")

    return respond


# ----------------------------------------------------------------- the server


@dataclass(frozen=True)
class Service:
    base_url: str
    tickets_db: Path
    run_db: Path
    ticket_id: str  # alice's open ticket, which the scripted model looks up and closes
    title: str


def _run_uvicorn() -> Any:
    """The server tests' harness (tests/server/server_harness.py): uvicorn in a thread on a free port."""
    server_tests = str(HERE.parent / "server")
    if server_tests not in sys.path:
        sys.path.insert(0, server_tests)
    from server_harness import run_uvicorn

    return run_uvicorn


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    from tether.models.openai_chat import OpenAIChatModel
    from tether.testing import FakeServer
    from tickets_app.db import TicketsDB
    from tickets_app.seed_data import seed
    from tickets_app.settings import Settings

    tickets_db, run_db = tmp_path / "tickets.db", tmp_path / "runs.db"
    with TicketsDB(tickets_db) as db:
        seed(db)
    ticket_id, title = _ticket_for("alice")

    with FakeServer(support_model(ticket_id)) as model_server:

        def model() -> OpenAIChatModel:
            # Streamed, so the page gets the answer as `text` events.
            return OpenAIChatModel("fake-model", base_url=model_server.base_url, api_key="test", stream=True)

        settings = Settings(tickets_db=tickets_db, run_db=run_db, jwt_secret="e2e-" + "s" * 60, model_factory=model)
        with _run_uvicorn()(settings) as origin:
            yield Service(origin, tickets_db, run_db, ticket_id, title)


# ----------------------------------------------------------------- the test


def test_chat_approve_and_close_in_the_browser(service: Service, tmp_path: Path) -> None:
    screenshots = tmp_path / "screenshots"
    env = {
        **os.environ,
        "TICKET_ID": service.ticket_id,
        "TICKET_TITLE": service.title,
        "SCREENSHOT_DIR": str(screenshots),
        "CHROMIUM_PATH": str(CHROMIUM),
    }
    proc = subprocess.run(
        ["node", str(SCRIPT), service.base_url],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    print(proc.stdout)
    print(proc.stderr)
    assert proc.returncode == 0, f"browser.mjs failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    assert "screenshot:" in proc.stdout

    # The ticket is closed, by one close (the close_key is that call's idempotency key) ...
    with sqlite3.connect(service.tickets_db) as db:
        status, closed_at, close_key = db.execute(
            "SELECT status, closed_at, close_key FROM tickets WHERE id = ?", (service.ticket_id,)
        ).fetchone()
    assert status == "closed" and closed_at is not None and close_key is not None
    # ... and the run store's ledger holds exactly one executed close_ticket, which changed it.
    with sqlite3.connect(service.run_db) as db:
        closes = db.execute("SELECT outcome FROM ledger WHERE tool = 'close_ticket'").fetchall()
    assert len(closes) == 1, closes
    outcome = json.loads(closes[0][0])
    assert outcome["ok"] is True and outcome["result"]["changed"] is True, outcome
