"""The seed data: four users and twenty support tickets of a small SaaS product.

Plain values only, so the seed is the same on every machine; ``seed()``
writes them into a ``TicketsDB``. Each user's password is ``<username>-pass``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tickets_app.db import Role, Status, TicketsDB


@dataclass(frozen=True, slots=True)
class SeedUser:
    id: str
    username: str
    role: Role
    created_at: str

    @property
    def password(self) -> str:
        return f"{self.username}-pass"


@dataclass(frozen=True, slots=True)
class SeedComment:
    author: str  # username
    at: str
    body: str


@dataclass(frozen=True, slots=True)
class SeedTicket:
    id: str
    reporter: str  # username
    assignee: str | None  # username
    status: Status
    created_at: str
    title: str
    body: str
    comments: tuple[SeedComment, ...] = ()
    closed_at: str | None = None

    @property
    def updated_at(self) -> str:
        times = [self.created_at, *(c.at for c in self.comments)]
        if self.closed_at is not None:
            times.append(self.closed_at)
        return max(times)


USERS = (
    SeedUser("user-alice", "alice", "customer", "2025-02-17T10:04:00Z"),
    SeedUser("user-bob", "bob", "customer", "2025-02-20T14:31:00Z"),
    SeedUser("user-carol", "carol", "agent", "2025-01-06T08:00:00Z"),
    SeedUser("user-dave", "dave", "admin", "2025-01-02T08:00:00Z"),
)

TICKETS = (
    SeedTicket(
        "TICKET-318204",
        "alice",
        "carol",
        "closed",
        "2025-03-03T09:12:00Z",
        "Password reset email never arrives",
        "I clicked 'Forgot password' three times this morning and no email has arrived, not even in spam. "
        "My login is alice@example.com. Could you check whether the reset emails are being sent?",
        (
            SeedComment(
                "carol",
                "2025-03-03T11:05:00Z",
                "Our mail provider was delaying messages to some domains this morning. The queue has been "
                "flushed; please request the reset again and let me know if it arrives.",
            ),
            SeedComment("alice", "2025-03-03T15:22:00Z", "It arrived within a minute and I'm back in. Thanks!"),
        ),
        closed_at="2025-03-03T15:40:00Z",
    ),
    SeedTicket(
        "TICKET-318650",
        "bob",
        "carol",
        "closed",
        "2025-03-04T07:48:00Z",
        "Account locked after too many login attempts",
        "I mistyped my password a few times and now the sign-in page says my account is locked for 24 hours. "
        "I need to send invoices to customers today. Can you unlock it sooner?",
        (
            SeedComment(
                "carol",
                "2025-03-04T08:20:00Z",
                "I've verified the request came from your registered email and unlocked the account. "
                "A password manager will help avoid lockouts in future.",
            ),
        ),
        closed_at="2025-03-04T08:21:00Z",
    ),
    SeedTicket(
        "TICKET-318977",
        "alice",
        "carol",
        "pending",
        "2025-03-04T16:30:00Z",
        "Charged twice for the March subscription",
        "My card statement shows two charges of $49.00 on 1 March from Northwind Cloud. I only have one "
        "workspace. Please refund the duplicate charge.",
        (
            SeedComment(
                "carol",
                "2025-03-05T09:10:00Z",
                "I can see both charges. Billing is refunding the duplicate; refunds take 5-10 business days "
                "to show on your statement. I'll keep this pending until the refund is confirmed.",
            ),
        ),
    ),
    SeedTicket(
        "TICKET-319733",
        "bob",
        None,
        "open",
        "2025-03-05T12:02:00Z",
        "Mobile app crashes when opening attachments",
        "On Android 14 (Pixel 7) the app closes as soon as I tap a PDF attachment on a ticket. Images open "
        "fine. I'm on app version 3.8.1 and have already reinstalled it.",
    ),
    SeedTicket(
        "TICKET-320415",
        "alice",
        None,
        "open",
        "2025-03-06T10:45:00Z",
        "CSV export stops at 10,000 rows",
        "Exporting the Orders report to CSV gives a file with exactly 10,000 rows, but the report shows "
        "14,322 orders. Is there a limit, and how can I get the full export?",
    ),
    SeedTicket(
        "TICKET-320902",
        "bob",
        "carol",
        "open",
        "2025-03-06T15:18:00Z",
        "Need a VAT invoice for February",
        "Our accountant needs an invoice for February that shows our VAT number (GB 123 4567 89) and the VAT "
        "amount separately. The invoice in the billing page shows only the total.",
        (
            SeedComment(
                "carol",
                "2025-03-07T09:30:00Z",
                "You can add the VAT number under Settings > Billing > Tax details; invoices issued after that "
                "show it. I've asked billing to reissue February's invoice for you.",
            ),
        ),
    ),
    SeedTicket(
        "TICKET-321066",
        "alice",
        "carol",
        "open",
        "2025-03-07T08:55:00Z",
        "Two-factor codes rejected after changing phones",
        "I moved to a new phone and restored my authenticator app from a backup. The six-digit codes are now "
        "always rejected. I still have my recovery codes but I'm not sure whether using one turns 2FA off.",
        (
            SeedComment(
                "carol",
                "2025-03-07T10:12:00Z",
                "Codes failing after a restore usually means the phone's clock is off. Please turn on automatic "
                "date and time and try again. Using a recovery code does not turn off 2FA.",
            ),
            SeedComment("alice", "2025-03-07T13:40:00Z", "The clock was set automatically already. Still rejected."),
        ),
    ),
    SeedTicket(
        "TICKET-321587",
        "bob",
        None,
        "open",
        "2025-03-08T11:20:00Z",
        "Cannot connect Google Calendar integration",
        "When I click 'Connect Google Calendar' and pick my work account, Google shows 'Error 400: "
        "redirect_uri_mismatch' and I'm sent back without a connection.",
    ),
    SeedTicket(
        "TICKET-322530",
        "alice",
        None,
        "open",
        "2025-03-10T19:03:00Z",
        "Feature request: dark mode for the dashboard",
        "Our support team works late shifts and the bright dashboard is hard on the eyes. Is a dark theme on "
        "the roadmap?",
    ),
    SeedTicket(
        "TICKET-322871",
        "bob",
        "carol",
        "pending",
        "2025-03-11T09:37:00Z",
        "Data import stuck at 99%",
        "I'm importing 2,400 contacts from a CSV. The progress bar has been at 99% for over an hour and the "
        "contacts page shows none of them yet.",
        (
            SeedComment(
                "carol",
                "2025-03-11T10:50:00Z",
                "Row 1,873 has a date in an unexpected format, which stalls the last step. I've cancelled the "
                "job; could you fix that row (use YYYY-MM-DD) and import again?",
            ),
        ),
    ),
    SeedTicket(
        "TICKET-323118",
        "alice",
        "carol",
        "closed",
        "2025-03-12T14:26:00Z",
        "Invoice shows our old company address",
        "We moved offices in January and updated the address in our profile, but the latest invoice still "
        "shows 12 Harbour Road. Invoices need the new address for our records.",
        (
            SeedComment(
                "carol",
                "2025-03-12T16:02:00Z",
                "Invoices use the billing address, which is separate from the profile address. I've updated it "
                "and reissued the March invoice; you'll find it under Billing > Invoices.",
            ),
        ),
        closed_at="2025-03-12T16:05:00Z",
    ),
    SeedTicket(
        "TICKET-323940",
        "bob",
        None,
        "closed",
        "2025-03-13T08:14:00Z",
        "Cancel my trial before it converts",
        "Please cancel the trial for the workspace 'bob-test' before it turns into a paid plan on Friday. "
        "We decided to stay with our current tool for now.",
        (
            SeedComment(
                "dave",
                "2025-03-13T09:00:00Z",
                "The trial is cancelled and no charge will be made. The workspace stays readable for 30 days "
                "if you want to export anything.",
            ),
        ),
        closed_at="2025-03-13T09:01:00Z",
    ),
    SeedTicket(
        "TICKET-324466",
        "bob",
        "carol",
        "open",
        "2025-03-14T13:09:00Z",
        "SSO login loops back to the sign-in page",
        "Since we switched our identity provider to Okta, signing in with SSO sends us to Okta, back to "
        "Northwind, and then to the sign-in page again. It happens for everyone on the team.",
    ),
    SeedTicket(
        "TICKET-324702",
        "alice",
        None,
        "open",
        "2025-03-15T10:31:00Z",
        "Webhook deliveries failing with 401",
        "Our order webhooks started failing on 14 March. The delivery log shows '401 Unauthorized' from our "
        "endpoint. We rotated the signing secret that day; do we need to do anything else?",
    ),
    SeedTicket(
        "TICKET-325391",
        "alice",
        "carol",
        "open",
        "2025-03-17T09:05:00Z",
        "Team member invitation link expired",
        "I invited a new colleague last week, but when she clicked the link today it said the invitation has "
        "expired. Resending doesn't seem to send a new email.",
    ),
    SeedTicket(
        "TICKET-326044",
        "alice",
        None,
        "closed",
        "2025-03-18T11:47:00Z",
        "How do I change the workspace owner?",
        "Our founder set up the workspace and is leaving the company. How do we transfer ownership to me "
        "before her account is removed?",
        (
            SeedComment(
                "dave",
                "2025-03-18T13:15:00Z",
                "The current owner can do it under Settings > Workspace > Transfer ownership. If she has already "
                "left, reply here with written confirmation from a company director and we'll transfer it.",
            ),
            SeedComment("alice", "2025-03-18T15:30:00Z", "She did the transfer this afternoon. All sorted."),
        ),
        closed_at="2025-03-18T15:45:00Z",
    ),
    SeedTicket(
        "TICKET-326518",
        "bob",
        None,
        "open",
        "2025-03-19T17:22:00Z",
        "Deleted a project by mistake - can it be restored?",
        "I deleted the project 'Q2 Campaign' about twenty minutes ago instead of archiving it. It had three "
        "months of tasks and files. Is there any way to get it back?",
    ),
    SeedTicket(
        "TICKET-327309",
        "bob",
        "carol",
        "open",
        "2025-03-20T08:40:00Z",
        "Email notifications arrive hours late",
        "Notifications for new comments reach us 3-4 hours after the comment is posted. In-app notifications "
        "are immediate. This started around 17 March.",
    ),
    SeedTicket(
        "TICKET-327815",
        "alice",
        "carol",
        "pending",
        "2025-03-21T12:12:00Z",
        "Dashboard very slow since the last update",
        "Since Tuesday's update the dashboard takes 15-20 seconds to load. Other pages are fine. We have "
        "about 40 widgets on it.",
        (
            SeedComment(
                "carol",
                "2025-03-21T14:00:00Z",
                "Thanks for the detail. Engineering found a slow query for dashboards with many widgets and a "
                "fix is scheduled for next week's release. I'll update you when it ships.",
            ),
        ),
    ),
    SeedTicket(
        "TICKET-328260",
        "alice",
        None,
        "open",
        "2025-03-24T09:58:00Z",
        "API rate limit lower than documented",
        "The docs say the Business plan allows 600 API requests per minute, but we get HTTP 429 responses "
        "after about 100 requests in a minute. The response headers show X-RateLimit-Limit: 100.",
    ),
)


def seed(db: TicketsDB) -> None:
    """Write the seed users, tickets and comments into ``db``.

    Deterministic apart from the password hashes' salts, and safe to run
    again: rows already there are left as they are, and a user who exists
    is not hashed again.
    """
    ids = {u.username: u.id for u in USERS}
    # The package's own read and write: the seed's rows keep their fixed ids and times, which no public method takes.
    existing = {row[0] for row in db._read("SELECT id FROM users")}
    hashes = {u.id: db.hasher.hash(u.password) for u in USERS if u.id not in existing}
    with db._write() as conn:
        for u in USERS:
            if u.id in hashes:
                conn.execute(
                    "INSERT OR IGNORE INTO users (id, username, password_hash, role, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (u.id, u.username, hashes[u.id], u.role, u.created_at),
                )
        comment_id = 0
        for t in TICKETS:
            conn.execute(
                "INSERT OR IGNORE INTO tickets (id, title, body, status, reporter, assignee, created_at, updated_at,"
                " closed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    t.id,
                    t.title,
                    t.body,
                    t.status,
                    ids[t.reporter],
                    ids[t.assignee] if t.assignee else None,
                    t.created_at,
                    t.updated_at,
                    t.closed_at,
                ),
            )
            for c in t.comments:
                comment_id += 1
                conn.execute(
                    "INSERT OR IGNORE INTO comments (id, ticket_id, author, body, created_at) VALUES (?, ?, ?, ?, ?)",
                    (comment_id, t.id, ids[c.author], c.body, c.at),
                )
