"""The ticket assistant as an Agent, for ``tether serve tickets_app.agent:agent`` (tether's generic API).

Its tools act for the caller's principal: give each user an API key whose
principal is their id in the tickets database and whose role is theirs
(``tether keys create --principal user-alice --roles customer``); closing a
ticket waits for a caller with the approver role. The tickets file is
``TETHER_TICKETS_DB`` (default tickets.db), the KB index ``TETHER_KB_INDEX``
(none: search_kb says the KB is empty), the model ``OPENAI_*``.
"""

from __future__ import annotations

from tether.drivers.local.runner import Agent
from tickets_app.app import open_kb
from tickets_app.db import TicketsDB
from tickets_app.settings import Settings
from tickets_app.tools import ticket_tools


def agent() -> Agent:
    """The assistant, its tools on the tickets file and KB the environment names."""
    settings = Settings.from_env()
    tools = ticket_tools(TicketsDB(settings.tickets_db), open_kb(settings))
    return Agent(settings.model_factory(), tools, system=settings.system)
