"""The support agent's tools over the tickets database and the knowledge base.

Who may see what is decided here, from ``ToolContext.principal`` — its id is
a user id, its roles hold the user's role — and never by a prompt:

- a customer sees and changes the tickets they reported;
- an agent sees and changes the tickets assigned to them;
- an admin sees and changes every ticket.

A ticket the principal may not see gets exactly the answer of one that does
not exist (``no ticket TICKET-…``), so ticket ids cannot be probed.

Text that someone other than the run's principal could have written taints
the run (every side-effecting call then needs approval): ``search_kb``
always (whoever edits the help centre wrote it); ``get_ticket`` and
``list_tickets`` when a title, body or comment they return was written by
another user (``ToolContext.mark_untrusted``). What the writing tools return
is what this run itself just wrote, so they never taint.

Side-effecting tools store ``ToolContext.idempotency_key`` with the row they
write: a call retried with the same key finds that row instead of writing a
second, and each has a ``reconcile`` hook that looks the key up after a crash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field

from tether.tools import Executed, NotExecuted, Tool, ToolContext, ToolError, tool
from tether.tools.tool import Verdict
from tickets_app.db import ROLES, TICKET_ID_PATTERN, Role, Ticket, TicketsDB, TicketsDBError

TicketId = Annotated[str, Field(pattern=TICKET_ID_PATTERN)]

KB_EMPTY_NOTE = "the knowledge base is empty: there are no documents to search"
KB_NO_MATCH_NOTE = "the knowledge base has no matching documents"


class Snippet(Protocol):
    """What ``tickets_app.kb`` returns for one match."""

    @property
    def source(self) -> str: ...
    @property
    def heading(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def score(self) -> float: ...


class KnowledgeSource(Protocol):
    """Anything with ``search``, such as ``tickets_app.kb.KnowledgeBase``."""

    def search(self, query: str, top_k: int) -> Sequence[Snippet]: ...


def role_of(roles: frozenset[str]) -> Role | None:
    """The principal's tickets role; the most privileged if it holds several."""
    for role in reversed(ROLES):  # admin, agent, customer
        if role in roles:
            return role
    return None


def _viewer(context: ToolContext) -> tuple[str, Role]:
    role = role_of(context.principal.roles)
    if role is None:
        raise ToolError("this principal has no tickets role (customer, agent or admin)")
    return context.principal.id, role


def _not_found(ticket_id: str) -> ToolError:
    # One text for "does not exist" and "not yours": nothing to tell them apart by.
    return ToolError(f"no ticket {ticket_id}")


def _created(ticket: Ticket) -> dict[str, Any]:
    return {"ticket": ticket.to_dict(), "created": True}


def _closed(ticket: Ticket, changed: bool) -> dict[str, Any]:
    return {"ticket_id": ticket.id, "status": ticket.status, "closed_at": ticket.closed_at, "changed": changed}


def ticket_tools(db: TicketsDB, kb: KnowledgeSource | None = None, *, ticket_text_untrusted: bool = True) -> list[Tool]:
    """``get_ticket``, ``list_tickets``, ``search_kb``, ``create_ticket``, ``add_comment``, ``close_ticket``.

    With ``ticket_text_untrusted`` (the default) a ticket's title, body or
    comment written by another user than the principal marks the result
    untrusted: it must not steer side-effecting calls without approval.
    ``False`` trusts every user's ticket text (never for customers' text).
    """

    def mark_if_others_wrote(context: ToolContext, authors: set[str]) -> None:
        if not ticket_text_untrusted:
            return
        me = db.get_user(context.principal.id)
        if me is None or authors - {me.username}:
            context.mark_untrusted()

    @tool(read_only=True)
    def get_ticket(ticket_id: TicketId, context: ToolContext) -> dict[str, Any]:
        """Show one ticket with its comments, oldest comment first.

        Args:
            ticket_id: The ticket's id, e.g. "TICKET-318204".
        """
        user_id, role = _viewer(context)
        ticket = db.visible_ticket(user_id, role, ticket_id)
        if ticket is None:
            raise _not_found(ticket_id)
        comments = db.comments(ticket_id)
        mark_if_others_wrote(context, {ticket.reporter, *(c.author for c in comments)})
        return {**ticket.to_dict(), "comments": [c.to_dict() for c in comments]}

    @tool(read_only=True)
    def list_tickets(
        context: ToolContext,
        status: Literal["open", "pending", "closed"] | None = None,
        page: Annotated[int, Field(ge=1)] = 1,
        page_size: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> dict[str, Any]:
        """List the tickets you may see, newest first, one page at a time.

        Args:
            status: Only tickets with this status; all statuses when left out.
            page: The page to show, starting at 1.
            page_size: Tickets per page, at most 50.
        """
        user_id, role = _viewer(context)
        found = db.list_visible(user_id, role, status=status, page=page, page_size=page_size)
        mark_if_others_wrote(context, {t.reporter for t in found.items})  # titles are the reporters' text
        return {
            "items": [t.to_dict(with_body=False) for t in found.items],
            "total": found.total,
            "page": found.page,
            "page_size": found.page_size,
        }

    @tool(read_only=True, untrusted_output=True)
    def search_kb(
        query: Annotated[str, Field(min_length=2, max_length=200)],
        top_k: Annotated[int, Field(ge=1, le=10)] = 5,
    ) -> dict[str, Any]:
        """Search the help-centre knowledge base for passages about a question.

        Args:
            query: What to look for, in plain words, e.g. "refund a duplicate charge".
            top_k: How many passages to return, at most 10.
        """
        if kb is None:
            return {"results": [], "count": 0, "note": KB_EMPTY_NOTE}
        snippets = kb.search(query, top_k)
        if not snippets:
            return {"results": [], "count": 0, "note": KB_NO_MATCH_NOTE}
        results = [
            {"source": s.source, "heading": s.heading, "text": s.text, "score": round(float(s.score), 4)}
            for s in snippets
        ]
        return {"results": results, "count": len(results)}

    def reconcile_create(context: ToolContext, arguments: Mapping[str, Any]) -> Verdict:
        ticket = db.ticket_by_key(context.idempotency_key)
        return NotExecuted() if ticket is None else Executed(_created(ticket))

    @tool(reconcile=reconcile_create)
    def create_ticket(
        title: Annotated[str, Field(min_length=3, max_length=200)],
        body: Annotated[str, Field(min_length=1, max_length=5000)],
        context: ToolContext,
    ) -> dict[str, Any]:
        """Open a new support ticket reported by you.

        Args:
            title: A short summary of the problem, e.g. "Cannot download invoices".
            body: The details: what happened, what was expected, any error text.
        """
        user_id, role = _viewer(context)
        if db.get_user(user_id) is None:
            raise ToolError("you have no account in the tickets database")
        # An agent takes the tickets they open: they see only tickets assigned to them.
        assignee = user_id if role == "agent" else None
        try:
            ticket = db.create_ticket(user_id, title, body, assignee=assignee, idempotency_key=context.idempotency_key)
        except TicketsDBError:
            raise ToolError("the ticket could not be created") from None
        return _created(ticket)

    def reconcile_comment(context: ToolContext, arguments: Mapping[str, Any]) -> Verdict:
        comment = db.comment_by_key(context.idempotency_key)
        return NotExecuted() if comment is None else Executed(comment.to_dict())

    @tool(reconcile=reconcile_comment)
    def add_comment(
        ticket_id: TicketId,
        body: Annotated[str, Field(min_length=1, max_length=5000)],
        context: ToolContext,
    ) -> dict[str, Any]:
        """Add a comment to a ticket; the reporter and the assigned agent see it.

        Args:
            ticket_id: The ticket's id, e.g. "TICKET-318204".
            body: The comment's text.
        """
        user_id, role = _viewer(context)
        try:
            comment = db.add_comment(user_id, role, ticket_id, body, idempotency_key=context.idempotency_key)
        except TicketsDBError:
            raise ToolError("the comment could not be added") from None
        if comment is None:
            raise _not_found(ticket_id)
        return comment.to_dict()

    def reconcile_close(context: ToolContext, arguments: Mapping[str, Any]) -> Verdict:
        ticket = db.ticket_closed_by_key(context.idempotency_key)
        if ticket is not None:
            return Executed(_closed(ticket, changed=True))
        # Closing is idempotent itself: if this key closed nothing, running the call is safe.
        return NotExecuted()

    @tool(approval=True, reconcile=reconcile_close)
    def close_ticket(ticket_id: TicketId, context: ToolContext) -> dict[str, Any]:
        """Close a ticket. A person approves each close before it happens.

        Args:
            ticket_id: The ticket's id, e.g. "TICKET-318204".
        """
        user_id, role = _viewer(context)
        outcome = db.close_ticket(user_id, role, ticket_id, idempotency_key=context.idempotency_key)
        if outcome is None:
            raise _not_found(ticket_id)
        return _closed(outcome.ticket, outcome.changed)

    return [get_ticket, list_tickets, search_kb, create_ticket, add_comment, close_ticket]
