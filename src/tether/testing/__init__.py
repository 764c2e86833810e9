"""Local HTTP servers for testing tether's model adapters over real sockets.

``FakeServer`` answers from a script or a named scenario; ``ReplayServer``
serves recorded real provider replies. Names are imported on first use, so
``import tether.testing`` stays cheap (no aiohttp, no fixture loading) and
``python -m tether.testing.fake_server`` does not import its module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.testing.fake_server import SCENARIOS, FakeServer
    from tether.testing.replay import ReplayServer
    from tether.testing.replies import Raw, Reply, ReplySpec, Responder, raw, text, tool_calls

__all__ = [
    "SCENARIOS",
    "FakeServer",
    "Raw",
    "ReplayServer",
    "Reply",
    "ReplySpec",
    "Responder",
    "raw",
    "text",
    "tool_calls",
]

_HOME = {name: "tether.testing.replies" for name in __all__} | {
    "SCENARIOS": "tether.testing.fake_server",
    "FakeServer": "tether.testing.fake_server",
    "ReplayServer": "tether.testing.replay",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
