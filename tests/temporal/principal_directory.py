"""A principal resolver for ``tether worker --resolve-principal principal_directory:current`` in the tests.

The directory is a file (named by ``DIRECTORY_REVOKED``) listing the ids
of revoked principals, read anew each time the worker asks: a test revokes
a principal by writing its id there, between runs or while one waits.
"""

from __future__ import annotations

import os
from pathlib import Path

from tether.tools.context import Principal


def current(principal: Principal) -> Principal | None:
    """The principal as the directory knows it now: None once its id is revoked."""
    revoked = Path(os.environ["DIRECTORY_REVOKED"])
    gone = revoked.read_text().split() if revoked.exists() else []
    return None if principal.id in gone else principal
