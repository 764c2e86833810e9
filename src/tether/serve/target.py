"""The Agent ``tether serve TARGET`` names: ``module:attribute`` or ``file.py:attribute``, as uvicorn takes apps.

The attribute is an ``Agent``, or a function of no arguments returning one.
Anything else (no colon, a file or module that is not there, one that
fails to import, a missing attribute, something that is not an Agent) is a
``ConfigurationError`` saying which, never a traceback; the name is looked
up as ``tether.drivers.targets`` looks up every name an operator gives.
While it loads, ``SERVED`` is set: an Agent with a tool that needs approval
is built without a store or an approver of its own.
"""

from __future__ import annotations

from typing import Any

from tether.core.errors import ConfigurationError, TetherError
from tether.drivers.local.runner import SERVED, Agent
from tether.drivers.targets import load_attribute

EXAMPLE = "agent.py:agent or my_package.agents:support"


def load_agent(target: str) -> Agent:
    """The Agent ``target`` names (``module:attribute`` or ``path/to/file.py:attribute``).

    It is built with ``SERVED`` set: it needs neither a store nor an approver (the service gives it both).
    """
    token = SERVED.set(True)
    try:
        return _load(target)
    finally:
        SERVED.reset(token)


def _load(target: str) -> Agent:
    found: Any = load_attribute(target, usage="tether serve", what="an Agent", example=EXAMPLE)
    if not isinstance(found, Agent) and callable(found) and not isinstance(found, type):
        try:
            found = found()
        except TetherError:
            raise
        except (Exception, SystemExit) as exc:  # a factory that exits has not given an Agent: not a clean exit
            raise ConfigurationError(f"{target}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, Agent):
        raise ConfigurationError(f"{target} is a {type(found).__name__}, not an Agent (or a function returning one)")
    return found
