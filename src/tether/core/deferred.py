"""A module imported when one of its names is first used, for modules a caller needs only on some paths.

Building an agent needs the budget and the messages but not the run state
machine, whose dataclasses cost more to define than the rest of the core
(issue 19: ``from tether import Agent`` against ``import aiohttp``). A
module that uses the machine only inside its functions names it so::

    if TYPE_CHECKING:
        from tether.core import machine  # type checkers see the module itself
    else:
        machine = deferred("tether.core.machine")

and writes ``machine.Status.COMPLETED`` or ``case machine.CallModel():``.
The import goes through the import system (its lock included), and each
name, once found, is kept on the stand-in, so later uses cost what a
module attribute costs.
"""

from __future__ import annotations

import importlib
from typing import Any


class Deferred:
    """Stands in for the module ``name`` until first use; then for each name it is asked, that name of the module."""

    def __init__(self, name: str) -> None:
        self._deferred_name = name

    def __getattr__(self, attr: str) -> Any:  # called only for a name not yet kept
        value = getattr(importlib.import_module(self._deferred_name), attr)
        setattr(self, attr, value)
        return value

    def __repr__(self) -> str:
        return f"<deferred module {self._deferred_name!r}>"


def deferred(name: str) -> Any:
    """A stand-in for the module ``name`` that imports it on first use (typed as ``Any``: see the module docstring)."""
    return Deferred(name)
