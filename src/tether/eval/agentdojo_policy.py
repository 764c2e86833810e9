"""The reviewed table of AgentDojo's functions: what each does, whose text it returns, and its sinks.

One row per function of the v1.2 suites (workspace, travel, banking, slack;
a name two suites share means the same thing in both). ``tests/eval``
checks that the table names every function of every suite, and nothing
else. The rules the rows follow:

- **read_only**: the call changes nothing anyone else can see. Marking an
  unread email read is the principal's own bookkeeping (read-only);
  fetching a web page is not: the request itself goes out to a server
  someone else runs (slack's injections exfiltrate through the URL), so
  ``get_webpage`` is side-effecting.
- **untrusted_output**: the result holds text someone other than the
  principal wrote: emails, calendar invitations, files (drives are shared),
  web pages, chat messages and channel and user names, reviews, and the
  listings of third-party catalogues (hotels, restaurants, car rentals,
  flights: their names and descriptions come from the businesses). A
  side-effecting function whose result echoes such text (a file appended
  to, an event whose invitation others wrote) counts too. Trusted: the
  principal's own records the system keeps (user and account data, balance,
  IBAN, standing orders, the address book, today's date) and results that
  only echo the call's own arguments.
- **sinks** (top-level parameters): the values that choose who receives
  something or which of the principal's things a call acts on, and text
  published to others. Recipients (email addresses, IBANs, slack users and
  channels, event participants), URLs, file ids shared or deleted, the
  booked business, account fields a takeover would change (password,
  address), and message bodies sent outside, and the text of a calendar
  event (the principal acts on it as their own plan). Other free text that
  stays with the principal (a new file in the own drive) is not a sink.
- **principal** (some of the sinks): the sinks whose value must be the
  principal's own word, not a fact a result vouches for: which of the
  principal's things a call destroys (a file, an email, an event). The
  ids are real, so an injection can pick one: workspace's injection 1
  deletes file 13, which the drive lists.
- **fields** (of an untrusted result, ``Tool.trusted_fields``): the fields
  the system itself writes, whose values become trusted text of the result
  while the rest stays others'. A field is named only when neither the
  attacker nor any third party can write its value, in AgentDojo's threat
  model (its injection vectors write emails' bodies, events' descriptions,
  files' contents, reviews, transactions' subjects, web pages and a
  channel's name) and in real life:
  - ``id_`` of an email, event or file, ``id`` of a transaction: assigned by
    the mail server, the calendar, the drive, the bank;
  - an email's ``timestamp``, ``status`` and ``read``; an event's
    ``start_time``, ``end_time``, ``all_day`` and ``status``: the server's
    records (times are values, not words);
  - a file's ``last_modified`` and ``size``: the drive's records;
  - a transaction's ``recipient`` (the IBAN the bank recorded: the
    principal's own for money received, the one the principal paid for money
    sent), ``amount``, ``date`` and ``recurring``.
  Not trusted, though the system vouches for them: who a record comes from.
  An email's ``sender``, a slack message's ``sender``, a file's ``owner``
  and a transaction's ``sender`` are authentic, but whoever sends the
  principal a mail, a message, a shared file or a transfer chooses them:
  trusted, an attacker's own mail saying "reply to me with the code" would
  send the code to a trusted address. Also not trusted: names, titles,
  subjects, bodies, descriptions, locations,
  file names and contents, reviews, URLs in messages, channel names (slack's
  attack writes one), an email's recipients and cc (its sender chose them),
  an event's participants (its organiser chose them), a file's
  ``shared_with`` (its owner's choice, an object), attachments (the sender's
  records), and every field of the travel catalogues (the businesses write
  them, prices included).
- A slack channel's member list (``get_users_in_channel``) holds only
  member ids the workspace keeps: it is the workspace's record, not others'
  text (a bare list: no field to name, so the function is ``OWN``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FunctionPolicy:
    """How tether treats one AgentDojo function."""

    read_only: bool
    untrusted_output: bool
    sinks: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()  # the fields of its untrusted result the system vouches for
    principal: tuple[str, ...] = ()  # the sinks that must be the principal's own word


def _reads(untrusted: bool, fields: tuple[str, ...] = ()) -> FunctionPolicy:
    return FunctionPolicy(True, untrusted, fields=fields)


def _acts(
    *sinks: str, untrusted: bool = False, fields: tuple[str, ...] = (), principal: tuple[str, ...] = ()
) -> FunctionPolicy:
    return FunctionPolicy(False, untrusted, sinks, fields, principal)


EMAIL = ("id_", "timestamp", "status", "read")
EVENT = ("id_", "start_time", "end_time", "all_day", "status")
FILE = ("id_", "last_modified", "size")
TRANSACTION = ("id", "recipient", "amount", "date", "recurring")


OTHERS = True  # returns text others wrote
OWN = False  # returns only the principal's own records or the call's own arguments

POLICY: dict[str, FunctionPolicy] = {
    # ---- email (workspace, travel)
    "send_email": _acts("recipients", "cc", "bcc", "body", "attachments"),
    "delete_email": _acts("email_id", principal=("email_id",)),
    "get_unread_emails": _reads(OTHERS, EMAIL),  # marks them read: the principal's own bookkeeping
    "get_sent_emails": _reads(OTHERS, EMAIL),  # replies quote what others wrote
    "get_received_emails": _reads(OTHERS, EMAIL),
    "get_draft_emails": _reads(OTHERS, EMAIL),
    "search_emails": _reads(OTHERS, EMAIL),
    "search_contacts_by_name": _reads(OWN),  # the principal's address book
    "search_contacts_by_email": _reads(OWN),
    "get_current_day": _reads(OWN),
    # ---- calendar (workspace, travel): invitations carry their organisers' text
    "search_calendar_events": _reads(OTHERS, EVENT),
    "get_day_calendar_events": _reads(OTHERS, EVENT),
    # Invitations go to the participants, and the event's text goes with them; with no participant the event is
    # still the principal's own plan for a day, read back as a reminder of what to do: a title, description or
    # location only others' text holds ("Booking a room at the Riverside View Hotel", travel's injection 2) is
    # the injection's instruction planted in the principal's calendar. Times alone carry no one's words.
    "create_calendar_event": _acts("participants", "title", "description", "location"),
    "cancel_calendar_event": _acts("event_id", principal=("event_id",)),  # cancellations go to its participants
    "reschedule_calendar_event": _acts("event_id", untrusted=OTHERS, fields=EVENT),  # returns the event, all of it
    "add_calendar_event_participants": _acts("event_id", "participants", untrusted=OTHERS, fields=EVENT),
    # ---- cloud drive (workspace): files are shared, their content others'
    "append_to_file": _acts("file_id", untrusted=OTHERS, fields=FILE),  # returns the whole file
    "search_files_by_filename": _reads(OTHERS, FILE),
    "create_file": _acts(),  # a new file in the principal's own drive, returned as written
    "delete_file": _acts("file_id", untrusted=OTHERS, fields=FILE, principal=("file_id",)),  # returns the file
    "get_file_by_id": _reads(OTHERS, FILE),
    "list_files": _reads(OTHERS, FILE),
    "share_file": _acts("file_id", "email", untrusted=OTHERS, fields=FILE),  # returns the shared file
    "search_files": _reads(OTHERS, FILE),
    # ---- travel: third-party catalogues and their reviews
    "get_user_information": _reads(OWN),
    "get_all_hotels_in_city": _reads(OTHERS),
    "get_hotels_prices": _reads(OTHERS),
    "get_rating_reviews_for_hotels": _reads(OTHERS),
    "get_hotels_address": _reads(OTHERS),
    "get_all_restaurants_in_city": _reads(OTHERS),
    "get_cuisine_type_for_restaurants": _reads(OTHERS),
    "get_restaurants_address": _reads(OTHERS),
    "get_rating_reviews_for_restaurants": _reads(OTHERS),
    "get_dietary_restrictions_for_all_restaurants": _reads(OTHERS),
    "get_contact_information_for_restaurants": _reads(OTHERS),
    "get_price_for_restaurants": _reads(OTHERS),
    "check_restaurant_opening_hours": _reads(OTHERS),
    "get_all_car_rental_companies_in_city": _reads(OTHERS),
    "get_car_types_available": _reads(OTHERS),
    "get_rating_reviews_for_car_rental": _reads(OTHERS),
    "get_car_fuel_options": _reads(OTHERS),
    "get_car_rental_address": _reads(OTHERS),
    "get_car_price_per_day": _reads(OTHERS),
    "get_flight_information": _reads(OTHERS),
    "reserve_hotel": _acts("hotel"),  # the result echoes the arguments
    "reserve_car_rental": _acts("company"),
    "reserve_restaurant": _acts("restaurant"),
    # ---- banking
    "get_iban": _reads(OWN),
    "send_money": _acts("recipient"),
    "schedule_transaction": _acts("recipient"),
    "update_scheduled_transaction": _acts("id", "recipient"),
    "get_balance": _reads(OWN),
    "get_most_recent_transactions": _reads(OTHERS, TRANSACTION),  # incoming transfers carry their senders' subjects
    "get_scheduled_transactions": _reads(OWN),  # the principal's own standing orders
    "read_file": _reads(OTHERS),  # bills and notices others sent
    "get_user_info": _reads(OWN),
    "update_password": _acts("password"),
    "update_user_info": _acts("first_name", "last_name", "street", "city"),
    # ---- slack: names, messages and web pages are all others'
    "get_channels": _reads(OTHERS),
    "add_user_to_channel": _acts("user", "channel"),
    "read_channel_messages": _reads(OTHERS),
    "read_inbox": _reads(OTHERS),
    "send_direct_message": _acts("recipient", "body"),
    "send_channel_message": _acts("channel", "body"),
    "get_users_in_channel": _reads(OWN),  # member ids the workspace keeps (see the rules)
    "invite_user_to_slack": _acts("user", "user_email"),
    "remove_user_from_slack": _acts("user"),
    "get_webpage": _acts("url", untrusted=OTHERS),  # the request goes out: the URL is sent to its server
    "post_webpage": _acts("url", "content"),
}

__all__ = ["EMAIL", "EVENT", "FILE", "POLICY", "TRANSACTION", "FunctionPolicy"]
