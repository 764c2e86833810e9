"""The current time in a named IANA zone.

The zone is required and echoed back: a time without its zone is a guess,
and the host's own zone is nobody's business but the host's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from tether.tools import Tool, ToolError, tool

# Every IANA name fits; dots cannot appear, so neither can "..".
ZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9/_+-]{0,63}$"
# Files in the zone database that ZoneInfo opens but that are no zone: "localtime" names the host's
# zone, "posixrules" the daylight saving rules of a POSIX TZ string that gives none (a link to some
# zone, often America/New_York). Compared lowercased, as a case-insensitive file system opens them.
NOT_ZONES = frozenset({"localtime", "posixrules"})


@tool(read_only=True)
def current_time(timezone: Annotated[str, Field(pattern=ZONE_PATTERN)]) -> dict[str, Any]:
    """The current date and time in an IANA time zone, in ISO 8601.

    Args:
        timezone: An IANA time zone name such as "Europe/Paris" or "UTC".
    """
    if timezone.lower() in NOT_ZONES:
        raise ToolError(f"unknown time zone: {timezone}")
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ToolError(f"unknown time zone: {timezone}") from None
    now = datetime.now(zone)
    offset = now.strftime("%z")  # "+0100"
    return {
        "time": now.isoformat(timespec="seconds"),
        "timezone": timezone,
        "utc_offset": f"{offset[:3]}:{offset[3:5]}",
    }


TOOLS: list[Tool] = [current_time]
