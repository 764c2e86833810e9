"""Who is calling: the seam between the HTTP layer and the ways a caller proves who it is.

An ``Authenticator`` turns a request into the ``Principal`` the caller acts
as (its id, scopes and roles), or refuses it with a 401 ``Problem``. The
served app asks it on every request and never looks at credentials itself.
Roles are what the app checks for decisions: a caller holding
``APPROVER_ROLE`` may decide the approvals addressed to that role.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tether.tools.context import Principal

if TYPE_CHECKING:
    from starlette.requests import Request

APPROVER_ROLE = "approver"


class Authenticator(Protocol):
    """Turns a request into its caller's ``Principal``; raises ``tether.serve.problems.Problem(401, ...)``."""

    async def authenticate(self, request: Request) -> Principal:
        """The principal the request's caller acts as; a 401 ``Problem`` when it proves no one."""
