"""tether.tickets: the ticket-support reference application's data and tools."""

from tether.core.errors import TicketsDBError
from tether.tickets.db import (
    Comment,
    Ticket,
    TicketPage,
    TicketsDB,
    User,
    verify_password,
)
from tether.tickets.seed_data import seed
from tether.tickets.tools import KnowledgeSource, Snippet, ticket_tools

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
