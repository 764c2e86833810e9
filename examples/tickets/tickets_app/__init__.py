"""tickets_app: the ticket-support service, an application built on ``tether.serve`` (examples/tickets/README.md).

Its data and tools (``db``, ``seed_data``, ``tools``, ``kb``), its sign-in,
HTTP API and page (``auth``, ``throttle``, ``app``), and how it starts
(``launch``; ``python -m tickets_app``). ``agent`` is the same assistant
for ``tether serve tickets_app.agent:agent``.
"""

from tickets_app.db import (
    Comment,
    Ticket,
    TicketPage,
    TicketsDB,
    TicketsDBError,
    User,
    verify_password,
)
from tickets_app.seed_data import seed
from tickets_app.tools import KnowledgeSource, Snippet, ticket_tools

__all__ = [
    "Comment",
    "KnowledgeSource",
    "Snippet",
    "Ticket",
    "TicketPage",
    "TicketsDB",
    "TicketsDBError",
    "User",
    "seed",
    "ticket_tools",
    "verify_password",
]
