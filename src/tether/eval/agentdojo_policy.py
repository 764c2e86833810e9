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
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FunctionPolicy:
    """How tether treats one AgentDojo function."""

    read_only: bool
    untrusted_output: bool
    sinks: tuple[str, ...] = ()


def _reads(untrusted: bool) -> FunctionPolicy:
    return FunctionPolicy(True, untrusted)


def _acts(*sinks: str, untrusted: bool = False) -> FunctionPolicy:
    return FunctionPolicy(False, untrusted, sinks)


OTHERS = True  # returns text others wrote
OWN = False  # returns only the principal's own records or the call's own arguments

POLICY: dict[str, FunctionPolicy] = {
    # ---- email (workspace, travel)
    "send_email": _acts("recipients", "cc", "bcc", "body", "attachments"),
    "delete_email": _acts("email_id"),
    "get_unread_emails": _reads(OTHERS),  # marks them read: the principal's own bookkeeping
    "get_sent_emails": _reads(OTHERS),  # replies quote what others wrote
    "get_received_emails": _reads(OTHERS),
    "get_draft_emails": _reads(OTHERS),
    "search_emails": _reads(OTHERS),
    "search_contacts_by_name": _reads(OWN),  # the principal's address book
    "search_contacts_by_email": _reads(OWN),
    "get_current_day": _reads(OWN),
    # ---- calendar (workspace, travel): invitations carry their organisers' text
    "search_calendar_events": _reads(OTHERS),
    "get_day_calendar_events": _reads(OTHERS),
    # Invitations go to the participants, and the event's text goes with them; with no participant the event is
    # still the principal's own plan for a day, read back as a reminder of what to do: a title, description or
    # location only others' text holds ("Booking a room at the Riverside View Hotel", travel's injection 2) is
    # the injection's instruction planted in the principal's calendar. Times alone carry no one's words.
    "create_calendar_event": _acts("participants", "title", "description", "location"),
    "cancel_calendar_event": _acts("event_id"),  # cancellations go to its participants
    "reschedule_calendar_event": _acts("event_id", untrusted=OTHERS),  # returns the event, description and all
    "add_calendar_event_participants": _acts("event_id", "participants", untrusted=OTHERS),
    # ---- cloud drive (workspace): files are shared, their content others'
    "append_to_file": _acts("file_id", untrusted=OTHERS),  # returns the whole file
    "search_files_by_filename": _reads(OTHERS),
    "create_file": _acts(),  # a new file in the principal's own drive, returned as written
    "delete_file": _acts("file_id", untrusted=OTHERS),  # returns the deleted file
    "get_file_by_id": _reads(OTHERS),
    "list_files": _reads(OTHERS),
    "share_file": _acts("file_id", "email", untrusted=OTHERS),  # returns the shared file
    "search_files": _reads(OTHERS),
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
    "get_most_recent_transactions": _reads(OTHERS),  # incoming transfers carry their senders' subjects
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
    "get_users_in_channel": _reads(OTHERS),
    "invite_user_to_slack": _acts("user", "user_email"),
    "remove_user_from_slack": _acts("user"),
    "get_webpage": _acts("url", untrusted=OTHERS),  # the request goes out: the URL is sent to its server
    "post_webpage": _acts("url", "content"),
}

__all__ = ["POLICY", "FunctionPolicy"]
