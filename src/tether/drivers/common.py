"""What both drivers share beyond the core (``tether.core``): helpers for reporting a run, no I/O.

The Temporal workflow imports this module inside its deterministic sandbox
(passed through), so it imports only ``tether.core`` and the standard
library, and does nothing when imported.
"""

from __future__ import annotations

from typing import Any

from tether.core import nesting


def json_object(text: str) -> dict[str, Any] | None:
    """``text`` decoded, when it is a JSON object no deeper than the gate accepts; else None.

    The model wrote it: text the gate refused (a stored run's too) must not crash the report of the refusal.
    """
    try:
        value = nesting.loads(text, nesting.MAX_DEPTH)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
